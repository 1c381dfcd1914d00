"""Branches (docs/store.md "Branches"): every message gets a parent, every
conversation an active leaf; today's linear conversations become single-branch trees.

The data step links each message to the one before it in position order and makes the last
one the conversation's active leaf, so the active path is exactly the old transcript.
"""

import django.db.models.deletion
from django.db import migrations, models


def linear_to_tree(apps, schema_editor):
    """Each conversation's messages in position order become one branch (nothing is lost or
    reordered: positions stay as they are)."""
    Conversation = apps.get_model("jxai_app", "Conversation")
    Message = apps.get_model("jxai_app", "Message")
    for conversation_id in Conversation.objects.order_by("pk").values_list("pk", flat=True).iterator():
        ids = list(Message.objects.filter(conversation_id=conversation_id).order_by("position")
                   .values_list("pk", flat=True))
        if not ids:
            continue
        Message.objects.bulk_update(
            [Message(pk=pk, parent_id=parent) for parent, pk in zip(ids, ids[1:])], ["parent"], batch_size=500)
        Conversation.objects.filter(pk=conversation_id).update(active_leaf_id=ids[-1])


class Migration(migrations.Migration):

    dependencies = [
        ('jxai_app', '0006_mcp_servers'),
    ]

    operations = [
        migrations.AddField(
            model_name='conversation',
            name='active_leaf',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='jxai_app.message'),
        ),
        migrations.AddField(
            model_name='message',
            name='parent',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='children', to='jxai_app.message'),
        ),
        migrations.AddField(
            model_name='message',
            name='stopped',
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(linear_to_tree, migrations.RunPython.noop, elidable=True),
    ]
