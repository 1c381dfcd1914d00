"""SSE framing without I/O (jxai_app.core.streaming.sse): every split point, line endings, the BOM,
the line cap, the ``error:`` field, the end-of-body tolerance, and the data-payload rules."""

from __future__ import annotations

import pytest

from jxai_app.core.streaming.fault import UpstreamFault
from jxai_app.core.streaming.sse import DONE, SSEReader, is_complete_object, parse_payload

BODY = ("\ufeffretry: 1000\r\n: comment\r\nevent: message\nid: 7\ndata: {\"a\": \"é東🌊\"}\r\n\r\n"
        "data: first\rdata:second\r\rdata: [DONE]\n\n").encode()
EXPECTED = [("message", "{\"a\": \"é東🌊\"}"), ("message", "first\nsecond"), ("message", "[DONE]")]


def events_of(chunks: list[bytes]) -> list[tuple[str, str]]:
    reader = SSEReader()
    out = [(e.event, e.data) for chunk in chunks for e in reader.feed(chunk)]
    last = reader.close()
    if last is not None:
        out.append((last.event, last.data))
    return out


def test_whole_body() -> None:
    assert events_of([BODY]) == EXPECTED


@pytest.mark.parametrize("cut", range(1, len(BODY)))
def test_every_two_way_split(cut: int) -> None:
    assert events_of([BODY[:cut], BODY[cut:]]) == EXPECTED


def test_one_byte_at_a_time() -> None:
    assert events_of([BODY[i:i + 1] for i in range(len(BODY))]) == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    assert events_of([b"data: x\r", b"\n\r", b"\ndata: y\r\n\r\n"]) == [("message", "x"), ("message", "y")]


def test_indented_field_is_not_a_field() -> None:
    assert events_of([b"  data: {}\n\n\tdata: {}\n\ndata: ok\n\n"]) == [("message", "ok")]


def test_error_field_becomes_an_error_event() -> None:
    assert events_of([b"data: a\n\nerror: {\"message\":\"m\"}\n\n"]) == [("message", "a"), ("error", "{\"message\":\"m\"}")]
    assert events_of([b"error:plain\n"]) == [("error", "plain")]


def test_errors_field_is_not_the_error_field() -> None:
    assert events_of([b"errors: x\ndata: y\n\n"]) == [("message", "y")]


def test_empty_data_and_id_only_events_are_dropped() -> None:
    assert events_of([b"id: 1\n\n\ndata:\n\nevent: ping\n\n: x\n\n"]) == []


def test_unterminated_last_event_is_returned_by_close() -> None:
    reader = SSEReader()
    assert [e.data for e in reader.feed(b"data: one\n\ndata: {\"b\":1}")] == ["one"]
    last = reader.close()
    assert last is not None and last.data == "{\"b\":1}"


def test_bom_only_at_start() -> None:
    assert events_of([b"\xef", b"\xbb", b"\xbfdata: x\n\n"]) == [("message", "x")]
    assert events_of([b"data: \xef\xbb\xbfx\n\n"]) == [("message", "\ufeffx")]
    assert events_of([b"\xef"]) == []  # a lone partial BOM at EOF is a partial line, not an event


def test_line_cap_across_many_reads() -> None:
    reader = SSEReader(max_line=1000)
    reader.feed(b"data: ")
    with pytest.raises(UpstreamFault) as caught:
        for _ in range(20):
            reader.feed(b"x" * 100)
    assert caught.value.code == "line_too_long"


def test_line_cap_inside_one_read() -> None:
    reader = SSEReader(max_line=1000)
    with pytest.raises(UpstreamFault) as caught:
        reader.feed(b"data: " + b"x" * 2000 + b"\n\n")
    assert caught.value.code == "line_too_long"


def test_line_at_the_cap_is_fine() -> None:
    reader = SSEReader(max_line=1000)
    line = b"data: " + b"x" * 994
    assert [e.data for e in reader.feed(line[:500]) + reader.feed(line[500:] + b"\n\n")] == ["x" * 994]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert events_of([b"data: \xff\xfe\n\n"]) == [("message", "\ufffd\ufffd")]


@pytest.mark.parametrize(("data", "expected"), [
    ("{\"a\":1}", {"a": 1}),
    ("  \t{\"a\":1}\t ", {"a": 1}),
    ("[DONE]", DONE),
    (" [DONE]\t", DONE),
    ("", None),
    ("ping", None),
    ("keep-alive", None),
    (": keepalive", None),
])
def test_payload_rules(data: str, expected: object) -> None:
    assert parse_payload(data) == expected if expected is not DONE else parse_payload(data) is DONE


@pytest.mark.parametrize("data", ["null", "42", "\"x\"", "[1,2]", "true", "{broken", "[oops", "{\"a\":1} trailing"])
def test_payloads_that_are_invalid_stream(data: str) -> None:
    with pytest.raises(UpstreamFault) as caught:
        parse_payload(data)
    assert caught.value.code == "invalid_stream"


def test_done_is_noise_where_not_a_sentinel() -> None:
    assert parse_payload("[DONE]", done_sentinel=False) is None


@pytest.mark.parametrize(("data", "complete"), [("[DONE]", True), ("{\"a\":1}", True), ("{\"a\":", False),
                                                ("null", False), ("text", False)])
def test_end_of_body_tolerance(data: str, complete: bool) -> None:
    assert is_complete_object(data) is complete
