"""The branches migration (docs/store.md "Branches"): conversations saved before branches
became single-branch trees, nothing lost, run with Django's migration executor on the real
database (SQLite or PostgreSQL, whichever the run uses)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, migrations
from django.db.migrations.executor import MigrationExecutor

from jxai_app import store
from jxai_app.models import Conversation, Message

pytestmark = pytest.mark.django_db(transaction=True)

Key = tuple[str, str]


def _branch_migration(executor: MigrationExecutor) -> tuple[Key, list[Key]]:
    """The migration whose data step is ``linear_to_tree`` (found by it, so a renumbering
    keeps this test), and the app's migrations it depends on."""
    for key, migration in executor.loader.disk_migrations.items():
        if key[0] == "jxai_app" and any(isinstance(op, migrations.RunPython) and op.code.__name__ == "linear_to_tree"
                                        for op in migration.operations):
            node = executor.loader.graph.node_map[key]
            return key, [parent.key for parent in node.parents if parent.key[0] == "jxai_app"]
    raise AssertionError("no migration runs linear_to_tree")


@pytest.fixture
def before_branches() -> Iterator[tuple[Any, Key]]:
    """The database migrated back to just before branches: the apps of that state and the
    branches migration's key. Afterwards every migration is applied again."""
    executor = MigrationExecutor(connection)
    target, before = _branch_migration(executor)
    executor.migrate(before)
    try:
        yield executor.loader.project_state(before).apps, target
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_linear_conversations_become_single_branch_trees(before_branches: tuple[Any, Key]) -> None:
    old, target = before_branches
    User = old.get_model(settings.AUTH_USER_MODEL)
    OldConversation, OldMessage = old.get_model("jxai_app", "Conversation"), old.get_model("jxai_app", "Message")
    OldToolCall = old.get_model("jxai_app", "ToolCall")
    owner = User.objects.create(username="before-branches")
    tools = OldConversation.objects.create(owner=owner, title="tools", model="m")
    rows = [("system", "Be brief.", ""), ("user", "What is 6 * 7?", ""), ("assistant", "", ""),
            ("tool", '{"success":true,"data":42}', "call_0"), ("assistant", "42.", ""), ("user", "Thanks", ""),
            ("assistant", "You're welcome.", "")]
    saved = [OldMessage.objects.create(conversation=tools, position=i, role=role, content=content, tool_call_id=call)
             for i, (role, content, call) in enumerate(rows)]
    OldToolCall.objects.create(message=saved[2], position=0, call_id="call_0", name="calculate",
                               arguments='{"expression":"6 * 7"}', result={"success": True, "data": 42}, success=True)
    lone = OldConversation.objects.create(owner=owner, title="lone", model="m")
    question = OldMessage.objects.create(conversation=lone, position=0, role="user", content="Anyone?")
    empty = OldConversation.objects.create(owner=owner, title="empty", model="m")

    executor = MigrationExecutor(connection)
    executor.migrate([target])
    new = executor.loader.project_state([target]).apps
    Migrated = new.get_model("jxai_app", "Message")
    chain = list(Migrated.objects.filter(conversation_id=tools.pk).order_by("position")
                 .values_list("pk", "parent_id", "role", "content"))
    assert [(role, content) for _, _, role, content in chain] == [(role, content) for role, content, _ in rows]
    assert [parent for _, parent, _, _ in chain] == [None, *[pk for pk, _, _, _ in chain[:-1]]]
    leaves = dict(new.get_model("jxai_app", "Conversation").objects.values_list("pk", "active_leaf_id"))
    assert leaves == {tools.pk: chain[-1][0], lone.pk: question.pk, empty.pk: None}

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    conversation = Conversation.objects.get(pk=tools.pk)
    assert store.to_messages(conversation) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "calculate",
                                                              "arguments": '{"expression":"6 * 7"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": '{"success":true,"data":42}'},
        {"role": "assistant", "content": "42."},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "You're welcome."},
    ]
    _, path = store.message_list(user=conversation.owner, conversation_id=conversation.pk)
    assert all(s.count == 1 for s in path.siblings.values()) and len(path.messages) == len(rows)
    turn = store.message_send(user=conversation.owner, conversation_id=conversation.pk, text="One more")
    assert turn.user_message.parent_id == chain[-1][0], "a send appends to the migrated path"
    assert Message.objects.filter(conversation_id=empty.pk).count() == 0
