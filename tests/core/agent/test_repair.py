"""History repair before each request (jxai_app.core.repair; docs/agent.md "History repair")."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from jxai_app.core.repair import (
    SEAL_CUT_OFF, SEAL_RELOADED, Dropped, Moved, is_empty_assistant, is_seal_content, repair_history,
    seal_content,
)

OK = '{"success":true,"data":1}'


def U(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def A(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def REQ(*calls: str | tuple[str, str], content: str | None = None) -> dict[str, Any]:
    out = []
    for c in calls:
        cid, args = (c, "{}") if isinstance(c, str) else c
        out.append({"id": cid, "type": "function", "function": {"name": "f", "arguments": args}})
    return {"role": "assistant", "content": content, "tool_calls": out}


def T(cid: Any, content: str = OK) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def seal(cid: str, sentence: str = SEAL_RELOADED) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid,
            "content": json.dumps({"success": False, "error": sentence}, separators=(",", ":"), ensure_ascii=False)}


def same_objects(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def test_rp1_well_formed_history_is_a_new_list_of_the_same_objects() -> None:
    history = [{"role": "system", "content": "s"}, U(), REQ("a", "b", content="let me look"), T("a"), T("b"),
               A("done"), U("again")]
    before = copy.deepcopy(history)
    result = repair_history(history)
    assert result.messages is not history
    assert same_objects(result.messages, history)
    assert not result.changed and result.sealed == result.dropped == result.moved == result.normalised == ()
    assert history == before


def test_rp2_reply_after_a_later_message_moves_back_after_its_request() -> None:
    req, reply, later = REQ("a"), T("a"), A("interim")
    result = repair_history([U(), req, later, reply])
    assert same_objects(result.messages, [result.messages[0], req, reply, later])
    assert result.moved == (Moved(index=3, call_id="a", request_index=1),)
    assert result.sealed == () and result.dropped == ()


def test_rp3_reply_in_a_later_requests_run_moves_to_the_earlier_request() -> None:
    first, second, rb, ra = REQ("a"), REQ("b"), T("b"), T("a")
    result = repair_history([U(), first, second, rb, ra])
    assert same_objects(result.messages[1:], [first, ra, second, rb])
    assert [m.call_id for m in result.moved] == ["a"]


def test_rp4_pairing_is_per_request_when_a_provider_reuses_call_ids() -> None:
    r1, reply1, r2 = REQ("call_0"), T("call_0"), REQ("call_0")
    result = repair_history([U(), r1, reply1, A("ok"), U("more"), r2])
    assert result.messages[1:3] == [r1, reply1] and result.messages[1] is r1 and result.messages[2] is reply1
    assert result.messages[-2] is r2
    assert result.messages[-1] == seal("call_0")
    assert [(s.call_id, s.request_index) for s in result.sealed] == [("call_0", 5)]


def test_rp5_reply_belongs_to_the_nearest_earlier_unanswered_request() -> None:
    older, newer, reply = REQ("c"), REQ("c"), T("c")
    result = repair_history([U(), older, newer, reply])
    assert result.messages[1] is older and result.messages[2] == seal("c")
    assert result.messages[3] is newer and result.messages[4] is reply
    assert [s.request_index for s in result.sealed] == [1]
    # the nearest one already answered: the next reply goes further back, to the older request
    x, y = T("c", '"x"'), T("c", '"y"')
    result = repair_history([U(), older, newer, x, y])
    assert same_objects(result.messages[1:], [older, y, newer, x])
    assert result.sealed == () and [m.index for m in result.moved] == [4]


@pytest.mark.parametrize(("arguments", "sentence"), [
    ('{"city":', SEAL_CUT_OFF), ("not json", SEAL_CUT_OFF), ("", SEAL_RELOADED), ("42", SEAL_RELOADED),
    ('{"city":"Oslo"}', SEAL_RELOADED),
])
def test_rp6_seal_content_names_why_the_call_never_completed(arguments: str, sentence: str) -> None:
    result = repair_history([U(), REQ(("a", arguments))])
    content = result.messages[-1]["content"]
    assert content == '{"success":false,"error":' + json.dumps(sentence, ensure_ascii=False) + "}"
    assert list(json.loads(content)) == ["success", "error"]
    assert seal_content(arguments) == content


def test_rp7_unpairable_replies_are_dropped_and_reported_in_transcript_order() -> None:
    early = T("later")                          # only a later request makes this id
    history = [U(), early, REQ("a", "later"), T("a"), T("a", '"again"'), T(""), {"role": "tool", "content": "x"},
               T("zzz"), T("later")]
    result = repair_history(history)
    assert [(d.index, d.reason) for d in result.dropped] == [
        (1, "orphan"), (4, "duplicate"), (5, "empty_call_id"), (6, "no_call_id"), (7, "unknown_id")]
    assert result.dropped[0].message is early
    assert [m.get("tool_call_id") for m in result.messages if m["role"] == "tool"] == ["a", "later"]


def test_rp8_a_tool_message_answers_only_its_own_call_id() -> None:
    result = repair_history([U(), REQ("a", "b"), T("a")])
    assert [m["tool_call_id"] for m in result.messages[2:]] == ["b", "a"]
    assert [s.call_id for s in result.sealed] == ["b"]


def test_rp9_seals_come_first_in_call_order_then_owned_replies_in_original_order() -> None:
    rc, ra = T("c"), T("a")
    result = repair_history([U(), REQ("a", "b", "c", "d"), rc, ra])
    assert [m["tool_call_id"] for m in result.messages[2:]] == ["b", "d", "c", "a"]
    assert result.messages[4] is rc and result.messages[5] is ra
    assert result.moved == ()


def test_rp10_an_id_made_twice_in_one_message_is_one_call() -> None:
    req = REQ("a", "a")
    result = repair_history([U(), req, T("a"), T("a", '"second"')])
    assert [c["id"] for c in result.messages[1]["tool_calls"]] == ["a"]
    assert result.normalised[0].reasons == ("duplicate_call_id",)
    assert [(d.index, d.reason) for d in result.dropped] == [(3, "duplicate")]
    unanswered = repair_history([U(), req])
    assert [s.call_id for s in unanswered.sealed] == ["a"] and len(unanswered.messages) == 3


def test_rp11_a_call_with_an_empty_id_is_never_sealed_nor_answerable() -> None:
    req = REQ("", "b", content="text")
    result = repair_history([U(), req, T(""), T("b")])
    assert result.sealed == ()
    assert [c["id"] for c in result.messages[1]["tool_calls"]] == ["b"]  # kept off the wire
    assert [(d.index, d.reason) for d in result.dropped] == [(2, "empty_call_id")]
    only_empty = repair_history([U(), REQ("")])
    assert [d.reason for d in only_empty.dropped] == ["empty_assistant"] and only_empty.sealed == ()


def test_rp12_seal_ids_are_positional_and_unique() -> None:
    result = repair_history([U(), REQ("c0", "c1")])
    assert [s.seal_id for s in result.sealed] == ["sealed_c0_0", "sealed_c1_1"]
    taken = [U(), REQ("sealed_c0_0"), T("sealed_c0_0"), REQ("c0"), A("x"), REQ("c0")]
    result = repair_history(taken)
    assert [s.seal_id for s in result.sealed] == ["sealed_c0_0_1", "sealed_c0_0_2"]


def test_rp13_a_seal_is_a_plain_tool_message() -> None:
    result = repair_history([U(), REQ(("a", '{"x":'))])
    (s,) = result.sealed
    assert s.message is result.messages[-1]
    assert list(s.message) == ["role", "tool_call_id", "content"]
    assert json.loads(s.message["content"]) == {"success": False, "error": SEAL_CUT_OFF}


@pytest.mark.parametrize("history", [
    [U(), REQ("a", "b"), A("x"), T("b"), U("2"), T("zz")],
    [U(), {"role": "assistant", "content": "", "id": "m1"}, REQ("c0", "c0"), T("c0"), T("c0"), 42, U("2")],
    [U(), REQ("sealed_c0_0"), REQ("c0"), REQ("c0"), T("c0"), {"role": "bot", "content": "?"}],
])
def test_rp14_repair_is_idempotent(history: list[Any]) -> None:
    once = repair_history(history)
    assert once.changed
    twice = repair_history(once.messages)
    assert not twice.changed
    assert same_objects(twice.messages, once.messages)


def test_rp15_seal_re_derived_exactly_and_seal_content_is_exact() -> None:
    ask = {"id": "call_ask", "type": "function", "function": {"name": "ask_user", "arguments": '{"q":"Which?"}'}}
    add = {"id": "call_add", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}}
    request = {"role": "assistant", "content": None, "tool_calls": [ask, add]}
    stopped = T("call_ask", '{"success":false,"error":"Stopped by the user."}')
    repaired = repair_history([U(), request, stopped]).messages
    assert repaired == [U(), request, seal("call_add"), stopped]
    without_seal = [m for m in repaired if not is_seal_content(m.get("content"))]
    assert repair_history(without_seal).messages == repaired
    assert is_seal_content(seal_content("")) and is_seal_content(seal_content("{"))
    for other in ['{"error":"' + SEAL_RELOADED + '","success":false}',
                  json.dumps({"success": False, "error": SEAL_RELOADED}), '{"success":false,"error":"x"}', None, 3]:
        assert not is_seal_content(other)


@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": ""},
    {"role": "assistant", "content": None},
    {"role": "assistant"},
    {"role": "assistant", "content": "", "reasoning_content": "I thought hard"},
    {"role": "assistant", "content": "", "tool_calls": []},
])
def test_empty_assistant_turns_are_never_sent(message: dict[str, Any]) -> None:
    assert is_empty_assistant(message)
    result = repair_history([U("1"), message, U("2")])
    assert result.messages == [U("1"), U("2")]
    assert [d.reason for d in result.dropped] == ["empty_assistant"]


def test_is_empty_assistant_only_for_assistants_without_text_or_calls() -> None:
    assert not is_empty_assistant(A(" "))
    assert not is_empty_assistant(REQ("a"))
    assert not is_empty_assistant({"role": "user", "content": ""})
    assert not is_empty_assistant("assistant")


def test_foreign_fields_are_stripped_into_copies_and_input_is_untouched() -> None:
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}, "result": {"ok": 1},
            "index": 0}
    history: list[Any] = [
        {"role": "system", "content": "sys", "timestamp": 1},
        {"role": "user", "content": "hi", "id": "msg_1", "streaming": False},
        {"role": "assistant", "content": "", "tool_calls": [call], "model": "gpt", "reasoning_content": None},
        {"role": "tool", "tool_call_id": "a", "content": OK, "isError": False},
        "junk", None, {"role": "wizard", "content": "?"},
    ]
    before = copy.deepcopy(history)
    result = repair_history(history)
    assert history == before
    assert result.messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": OK},
    ]
    assert [n.index for n in result.normalised] == [0, 1, 2, 3]
    assert [(d.index, d.reason) for d in result.dropped] == [(4, "not_a_message"), (5, "not_a_message"),
                                                            (6, "unknown_role")]


def test_malformed_tool_calls_are_cleaned_not_fatal() -> None:
    msg = {"role": "assistant", "content": "hello", "tool_calls": "nope"}
    result = repair_history([U(), msg])
    assert result.messages[1] == {"role": "assistant", "content": "hello"}
    assert result.normalised[0].reasons == ("bad_tool_calls",)
    msg2 = {"role": "assistant", "tool_calls": [7, {"id": "b", "function": {"name": 3, "arguments": None}}]}
    result = repair_history([U(), msg2])
    assert result.messages[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "b", "type": "function", "function": {"name": "", "arguments": ""}}]}
    assert result.messages[2] == seal("b")


def test_dropped_report_types() -> None:
    result = repair_history([T("x")])
    assert result.dropped == (Dropped(index=0, reason="unknown_id", message=T("x")),)
