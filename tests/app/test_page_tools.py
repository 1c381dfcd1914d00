"""The page's everyday tools over the websocket (docs/websocket.md "Search, feedback and
custom instructions"): feedback on one's own answers only (IDOR), custom instructions in the
system prompt the provider receives, and search scoped to the owner.

Real parts: the consumer through WebsocketCommunicator, the real database, a FakeProvider on
127.0.0.1 playing the model.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from jxai_app import store
from jxai_app.models import MessageFeedback
from jxai_app.store.instructions import INSTRUCTIONS_HEADING
from tests.app.test_turns import consumer_on, worker_b  # noqa: F401  (a second worker over the layer)
from tests.app.turns_support import Tab, fake, hub, text_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)


async def _answered(tab: Tab, fake: FakeProvider, text: str, cid: str | None = None) -> tuple[str, int]:
    """Send ``text`` (in a new conversation unless ``cid``); the conversation's id and the
    saved answer's id once the turn ended."""
    fake.add(text_script(["Fine, ", "thanks."]))
    start = len(tab.frames)
    await tab.send(type="send", conversationId=cid, text=text, model=None)
    await tab.until_event("turn_end")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    frames = tab.frames[start:]
    saved = [f["message"] for f in frames if f["type"] == "message_saved" and f["message"]["role"] == "assistant"]
    return next(f["conversation"]["id"] for f in frames if f["type"] == "conversation"), saved[-1]["id"]


@sync_to_async
def _feedback_rows() -> list[tuple[int, str, str]]:
    return list(MessageFeedback.objects.order_by("pk").values_list("message_id", "rating", "comment"))


async def test_feedback_reaches_every_tab_and_the_snapshot(user: Any, fake: FakeProvider, hub: Any) -> None:
    tab = await Tab(user).open()
    cid, answer = await _answered(tab, fake, "How are you?")
    other = await Tab(user).open()
    await other.send(type="subscribe", conversationId=cid)
    await other.until(lambda f: f["type"] == "snapshot")

    await tab.send(type="feedback", messageId=answer, rating="down", comment="  Too short.  ")
    for follower in (tab, other):
        frame = await follower.until(lambda f: f["type"] == "feedback")
        assert frame == {"type": "feedback", "conversationId": cid, "messageId": answer,
                         "feedback": {"rating": "down", "comment": "Too short."}}
    assert await _feedback_rows() == [(answer, "down", "Too short.")]

    await tab.send(type="feedback", messageId=answer, rating="up")            # replaced, comment gone
    assert (await tab.until(lambda f: f["type"] == "feedback"))["feedback"] == {"rating": "up", "comment": ""}
    await tab.send(type="subscribe", conversationId=cid)
    snapshot = await tab.until(lambda f: f["type"] == "snapshot")
    rated = {m["id"]: m["feedback"] for m in snapshot["messages"]}
    assert rated[answer] == {"rating": "up", "comment": ""}
    assert [m["feedback"] for m in snapshot["messages"] if m["role"] == "user"] == [None]

    await tab.send(type="feedback", messageId=answer, rating=None)           # withdrawn
    assert (await tab.until(lambda f: f["type"] == "feedback"))["feedback"] is None
    assert await _feedback_rows() == []
    await tab.close()
    await other.close()


async def test_feedback_reaches_a_tab_on_another_worker(user: Any, fake: FakeProvider, hub: Any,
                                                        worker_b: Any) -> None:
    tab = await Tab(user).open()
    cid, answer = await _answered(tab, fake, "Across workers?")
    far = await Tab(user, consumer_on(worker_b)).open()
    await far.send(type="subscribe", conversationId=cid)
    await far.until(lambda f: f["type"] == "snapshot")
    await tab.send(type="feedback", messageId=answer, rating="up", comment="Good.")
    frame = await far.until(lambda f: f["type"] == "feedback")
    assert frame["feedback"] == {"rating": "up", "comment": "Good."} and frame["messageId"] == answer
    await tab.close()
    await far.close()


async def test_nobody_gives_feedback_on_another_users_message(user: Any, other_user: Any, fake: FakeProvider,
                                                              hub: Any) -> None:
    owner = await Tab(user).open()
    cid, answer = await _answered(owner, fake, "Secret plans")
    intruder = await Tab(other_user).open()
    missing = answer + 1000
    for message_id in (answer, missing):
        await intruder.send(type="feedback", messageId=message_id, rating="down", comment="ha")
        error = await intruder.until(lambda f: f["type"] == "error")
        assert (error["code"], error["request"], error["message"]) == ("not-found", "feedback", "Message not found.")
    # the owner's user message is not an answer: not-found too, the same for a foreign one
    user_message = next(f["message"]["id"] for f in owner.of_type("message_saved") if f["message"]["role"] == "user")
    await owner.send(type="feedback", messageId=user_message, rating="up")
    assert (await owner.until(lambda f: f["type"] == "error"))["code"] == "not-found"
    assert await _feedback_rows() == []
    assert await owner.quiet(), "the owner's tab heard nothing of the intruder's tries"
    await owner.close()
    await intruder.close()


@pytest.mark.parametrize("frame, code", [
    ({"type": "feedback", "messageId": 1, "rating": "meh"}, "invalid-request"),
    ({"type": "feedback", "messageId": "1", "rating": "up"}, "invalid-request"),
    ({"type": "feedback", "messageId": 1}, "invalid-request"),
    ({"type": "feedback", "messageId": 1, "rating": "up", "comment": "x" * 2001}, "invalid-request"),
    ({"type": "instructions", "text": 42}, "invalid-request"),
    ({"type": "instructions", "text": "x" * 4001}, "invalid-request"),
    ({"type": "search", "query": "x" * 501}, "invalid-request"),
    ({"type": "search"}, "invalid-request"),
])
async def test_bad_frames_get_an_error_and_the_socket_stays(user: Any, fake: FakeProvider, hub: Any,
                                                            frame: dict[str, Any], code: str) -> None:
    tab = await Tab(user).open()
    cid, answer = await _answered(tab, fake, "Hello")
    if frame.get("messageId") == 1:
        frame = {**frame, "messageId": answer}
    await tab.send(**frame)
    assert (await tab.until(lambda f: f["type"] == "error"))["code"] == code
    assert await _feedback_rows() == [] and await sync_to_async(store.instructions_get)(user=user) == ""
    await tab.send(type="search", query="hello")                               # still answering
    assert (await tab.until(lambda f: f["type"] == "search_results"))["items"]
    await tab.close()


async def test_custom_instructions_reach_the_providers_system_prompt(user: Any, other_user: Any,
                                                                     fake: FakeProvider, hub: Any) -> None:
    tab = await Tab(user).open()
    await tab.send(type="instructions")
    assert await tab.until(lambda f: f["type"] == "instructions") == {"type": "instructions", "text": "",
                                                                      "maxChars": 4000}
    await tab.send(type="instructions", text="  Answer in French.\nCall me Ada.  ")
    saved = await tab.until(lambda f: f["type"] == "instructions")
    assert saved["text"] == "Answer in French.\nCall me Ada."

    cid, _ = await _answered(tab, fake, "Hello")
    system = fake.requests[-1].json["messages"][0]
    assert system["role"] == "system"
    assert system["content"].endswith(f"\n\n{INSTRUCTIONS_HEADING}\nAnswer in French.\nCall me Ada.")
    assert system["content"].startswith("You are jxai")                        # the deployment's prompt first

    other = await Tab(other_user).open()                                       # another user's turn: not theirs
    await _answered(other, fake, "Hi")
    assert "Ada" not in fake.requests[-1].json["messages"][0]["content"]

    await tab.send(type="instructions", text="")                               # removed: the next turn is plain
    await tab.until(lambda f: f["type"] == "instructions" and f["text"] == "")
    await _answered(tab, fake, "Once more", cid)
    assert fake.requests[-1].json["messages"][-1] == {"role": "user", "content": "Once more"}
    assert INSTRUCTIONS_HEADING not in fake.requests[-1].json["messages"][0]["content"]
    await tab.close()
    await other.close()


async def test_search_answers_with_the_users_own_messages_only(user: Any, other_user: Any, fake: FakeProvider,
                                                               hub: Any) -> None:
    tab = await Tab(user).open()
    cid, _ = await _answered(tab, fake, "Which trains go to Zermatt?")
    other = await Tab(other_user).open()
    await _answered(other, fake, "My Zermatt secret")
    await tab.send(type="search", query="zermatt")
    frame = await tab.until(lambda f: f["type"] == "search_results")
    assert frame["query"] == "zermatt"
    assert [(i["conversationId"], i["role"]) for i in frame["items"]] == [(cid, "user")]
    assert all("secret" not in i["snippet"] for i in frame["items"])
    await tab.close()
    await other.close()
