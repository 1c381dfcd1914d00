"""Feedback on assistant messages: the owner's thumbs up/down and optional comment, for
staff review in admin (docs/store.md "Feedback").

Only the conversation's owner gives feedback, and only on a saved (complete) assistant
message: the message is looked up by id *and* owner in one query, so another user's
message id gets the same ``not-found`` as a missing one (docs/security.md, threat 1).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from jxai_app import conf
from jxai_app.core.problems import problem_error
from jxai_app.models import FeedbackRating, Message, MessageFeedback, MessageRole, MessageStatus
from jxai_app.store.common import bounded_text, invalid, owned


def feedback_dict(feedback: MessageFeedback | None) -> dict[str, Any] | None:
    """``{"rating": "up" | "down", "comment": str}``, or ``None`` for no feedback."""
    return None if feedback is None else {"rating": feedback.rating, "comment": feedback.comment}


def feedback_of(message: Message) -> MessageFeedback | None:
    """The message's feedback, or ``None`` (select ``feedback`` with the message to save a
    query per message)."""
    try:
        return message.feedback
    except MessageFeedback.DoesNotExist:
        return None


def feedback_export(conversation: Any) -> list[dict[str, Any]]:
    """The conversation's feedback for admin's export, in transcript order::

        [{"position": int, "answer": str (the rated message's text), "rating": "up" | "down",
          "comment": str, "updated_at": ISO 8601}]
    """
    rows = MessageFeedback.objects.filter(message__conversation=conversation).select_related("message")
    return [
        {"position": f.message.position, "answer": f.message.content, "rating": f.rating, "comment": f.comment,
         "updated_at": f.updated_at.isoformat()}
        for f in rows.order_by("message__position")
    ]


@transaction.atomic
def feedback_set(*, user: Any, message_id: Any, rating: str | None,
                 comment: str = "") -> tuple[uuid.UUID, dict[str, Any] | None]:
    """Give, change or withdraw (``rating`` ``None``) ``user``'s feedback on one of their
    saved assistant messages. Giving it again replaces rating and comment.

    Args:
        user: the requesting user; must own the message's conversation.
        message_id: the message's id (an integer, as in the protocol's ``message`` object).
        rating: ``"up"``, ``"down"``, or ``None`` to withdraw (the comment goes with it).
        comment: optional words, at most ``JXAI_FEEDBACK_COMMENT_MAX_CHARS`` characters
            (trimmed; NUL and lone surrogates saved as U+FFFD).

    Returns:
        ``(conversation id, feedback dict or None)`` (:func:`feedback_dict`).

    Raises:
        ProblemError: ``not-found`` for a missing or foreign message, or one that is not a
            saved assistant message; ``invalid-request`` for a bad rating or comment.
    """
    if rating is not None and rating not in FeedbackRating.values:
        raise invalid("'feedback': 'rating' must be \"up\", \"down\" or null.")
    comment = bounded_text(comment, what="A feedback comment", limit=conf.get_page_limits().feedback_comment_max_chars)
    if not isinstance(message_id, int) or isinstance(message_id, bool):
        raise problem_error("not-found", "Message not found.")
    message = (Message.objects.select_for_update()
               .filter(pk=message_id, conversation__in=owned(user), role=MessageRole.ASSISTANT,
                       status=MessageStatus.COMPLETE).first())
    if message is None:
        raise problem_error("not-found", "Message not found.")
    if rating is None:
        MessageFeedback.objects.filter(message=message).delete()
        return message.conversation_id, None
    feedback, _ = MessageFeedback.objects.update_or_create(message=message,
                                                           defaults={"rating": rating, "comment": comment})
    return message.conversation_id, feedback_dict(feedback)
