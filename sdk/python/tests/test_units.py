"""The pure pieces: SSE framing, the stream cursor's order checks, Retry-After, the retry policy."""

from __future__ import annotations

import email.utils
import time

import pytest

import orca_client
from orca_client._errors import APIConnectionError, OrcaError, parse_retry_after
from orca_client._retry import backoff, may_resend, retry_delay
from orca_client._sse import FrameParser, parse_event
from orca_client._streaming import _Cursor

RUN = "01a222a7-a60f-7374-bb2b-ff9a0974a7c3"


def event(seq: int, kind: str = "token"):
    data = {"status": "succeeded"} if kind in {"final", "status"} else {"text": "x"}
    if kind == "final":
        data = {"status": "succeeded", "completion": "success", "output": "x",
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "llm_calls": 1, "tool_calls": 0}}
    return parse_event({"seq": seq, "run_id": RUN, "kind": kind, "ts": "2026-01-01T00:00:00Z", "data": data})


def test_frames_dispatch_on_blank_lines_only():
    parser = FrameParser()
    lines = [": keep-alive", "", "id: 1", "event: token", "data: {\"a\":", "data: 1}", "", "id: 2", "data: {\"cut"]
    frames = [f for f in (parser.feed(line) for line in lines) if f]
    assert len(frames) == 1
    assert (frames[0].id, frames[0].event, frames[0].data) == ("1", "token", "{\"a\":\n1}")


def test_cursor_drops_repeats_and_refuses_gaps():
    cursor = _Cursor(None, 0)
    accepted = [e.seq for e in map(event, [1, 2, 2, 1, 3]) if cursor.accept(e)]
    assert accepted == [1, 2, 3] and cursor.run_id == RUN and cursor.last == 3
    with pytest.raises(orca_client.StreamError, match="missing"):
        cursor.accept(event(5))
    assert cursor.accept(event(4, "final")) and cursor.final.seq == 4


def test_cursor_resumes_after_the_last_seq():
    cursor = _Cursor(RUN, 7)
    call = cursor.open_call(None, "key")
    assert call.method == "GET" and call.headers["Last-Event-ID"] == "7"
    assert not cursor.accept(event(7)) and cursor.accept(event(8))
    fresh = _Cursor(None, 0).open_call({"input": "x"}, "key-1")
    assert fresh.method == "POST" and fresh.headers["Idempotency-Key"] == "key-1"


def test_retry_after_in_seconds_and_as_a_date():
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= parse_retry_after(later) <= 31


def test_retry_policy():
    assert may_resend("GET", {}) and may_resend("put", {}) and may_resend("DELETE", {})
    assert not may_resend("POST", {}) and not may_resend("PATCH", {})
    assert may_resend("POST", {"Idempotency-Key": "k"})
    assert retry_delay(0, OrcaError("x", status=429, retry_after=5)) == 5
    assert retry_delay(0, OrcaError("x", status=503, retry_after=600)) is None
    for attempt in range(10):
        assert 0 < backoff(attempt) <= 8.0
    assert retry_delay(3, APIConnectionError("down")) <= 4.0


def test_an_event_of_a_newer_server_is_kept_as_an_unknown_event():
    base = {"run_id": RUN, "ts": "2026-01-01T00:00:00Z", "step_id": None}
    new_kind = parse_event({**base, "seq": 1, "kind": "thought", "data": {"text": "hm"}})
    assert isinstance(new_kind, orca_client.UnknownEvent)
    assert (new_kind.seq, new_kind.kind, new_kind.data) == (1, "thought", {"text": "hm"})
    new_status = parse_event({**base, "seq": 2, "kind": "status", "data": {"status": "hibernating"}})
    assert isinstance(new_status, orca_client.UnknownEvent) and new_status.data["status"] == "hibernating"
    known = parse_event({**base, "seq": 3, "kind": "status", "data": {"status": "running", "extra": 1}})
    assert type(known).__name__ == "StatusEvent", "a known kind with a new member stays typed"
    cursor = _Cursor(None, 0)
    assert [cursor.accept(e) for e in (new_kind, new_status, known)] == [True, True, True]
    with pytest.raises(orca_client.StreamError, match="unparsable"):
        parse_event({"seq": "x", "kind": 3})
