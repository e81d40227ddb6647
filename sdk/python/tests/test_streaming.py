"""Event streams: typed events in order, each once, across cut connections and a server
restart; input answered through a callback; leaving a stream cancels nothing."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

import orca_client
from orca_client import models

from conftest import CuttingProxy, collect, resolve
from plans import approval_run, echo_run

# The offline model pauses between tokens so a stream can be cut while the run goes on.
SLOW_TOKENS = {"ORCA_LLM__OFFLINE_TOKEN_DELAY_MS": "15"}


@pytest.fixture
def orca(orca_factory):
    return orca_factory(**SLOW_TOKENS)


def make_client(flavour: str, url: str, **kw):
    return orca_client.Client(url, **kw) if flavour == "sync" else orca_client.AsyncClient(url, **kw)


async def each(stream):
    """Iterates a RunStream or an AsyncRunStream."""
    if hasattr(stream, "__aiter__"):
        async for event in stream:
            yield event
    else:
        for event in stream:
            yield event


def history(url: str, run_id: str) -> list:
    with orca_client.Client(url) as direct:
        return direct.runs.events(run_id)


def dumped(events) -> list:
    return [e.model_dump(mode="json") for e in events]


def assert_complete(events, stored) -> None:
    """Every stored event, in order, exactly once, ending with `final`."""
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(events) + 1)), f"duplicate or missing events: {seqs}"
    assert events[-1].kind == "final"
    assert dumped(events) == dumped(stored)


async def test_stream_yields_typed_events_and_final_run(client):
    stream = client.runs.stream(input="10 + 20 계산해줘", orchestration="simple")
    events = await collect(stream)
    kinds = [e.kind for e in events]
    assert kinds[0] == "status" and kinds[-1] == "final" and "tool_call" in kinds and "token" in kinds
    assert stream.final_event is events[-1]
    # A discriminated union on `kind`: each event is its kind's model, with typed `data`.
    assert isinstance(events[-1], models.FinalEvent) and events[-1].data.completion == "success"
    call = next(e for e in events if e.kind == "tool_call")
    assert isinstance(call, models.ToolCallEvent) and call.data.tool == "math.calculate"
    assert "".join(e.data.text for e in events if isinstance(e, models.TokenEvent)) == "The result is 30."
    run = await resolve(stream.final_run())
    assert run.status == "succeeded" and str(run.id) == stream.run_id
    assert_complete(events, await resolve(client.runs.events(stream.run_id)))


async def test_stream_survives_connections_cut_mid_event(orca, flavour):
    # The proxy closes the create's stream and then the first resume, each after 1,500 bytes
    # (inside an event); the third connection reads to the end.
    proxy = CuttingProxy(orca.port, after_bytes=1500, cuts=2)
    client = make_client(flavour, proxy.url)
    try:
        stream = client.runs.stream(echo_run(60))
        events = await collect(stream)
        assert proxy.cuts_done == 2, "the proxy did not cut both connections"
        assert 3 <= proxy.connections
        assert_complete(events, history(orca.url, stream.run_id))
        run = await resolve(stream.final_run())
        assert run.status == "succeeded"
    finally:
        proxy.close()
        await resolve(client.close())


async def test_stream_across_server_restart(orca, flavour):
    client = make_client(flavour, orca.url)
    try:
        stream = client.runs.stream(echo_run(80))
        events, killed_after = [], None
        async for event in each(stream):
            events.append(event)
            if event.seq == 8 and killed_after is None:
                orca.kill()  # a crash: no clean shutdown, the connection just breaks
                orca.start()  # same port, same database: the run resumes from its checkpoint
                killed_after = event.seq
        assert killed_after == 8 and orca.starts == 2
        assert len(events) > killed_after + 1
        assert_complete(events, history(orca.url, stream.run_id))
        assert events[-1].data.status == "succeeded"
    finally:
        await resolve(client.close())


async def test_input_answered_through_callback(client, flavour):
    asked = []

    def answer(data):
        asked.append(data)
        return {"approved": True}

    async def answer_async(data):
        return answer(data)

    run = await resolve(client.runs.run(approval_run(), on_input=answer if flavour == "sync" else answer_async))
    assert run.status == "succeeded"
    assert run.output == {"approved": True}
    assert len(asked) == 1 and isinstance(asked[0], models.InputRequiredData)
    assert asked[0].step_id == "approve" and asked[0].prompt == "Publish?"


async def test_join_follows_an_existing_run(client):
    run = await resolve(client.runs.create(approval_run()))
    rid = str(run.id)
    seen = []
    joined = client.runs.join(rid, on_input=lambda data: seen.append(data) or {"approved": False})
    events = await collect(joined)
    assert seen and events[-1].kind == "final"
    stored = await resolve(client.runs.events(rid))
    assert_complete(events, stored)
    # From the middle, and from the end (204: nothing follows).
    assert [e.seq for e in await collect(client.runs.join(rid, after=3))] == list(range(4, len(stored) + 1))
    assert await collect(client.runs.join(rid, after=len(stored))) == []


async def test_leaving_a_stream_does_not_cancel_the_run(client, flavour):
    stream = client.runs.stream(echo_run(30))
    got = []
    async for event in each(stream):
        got.append(event)
        if len(got) == 3:
            break
    await resolve(stream.close() if flavour == "sync" else stream.aclose())
    rid = stream.run_id

    async def status():
        return (await resolve(client.runs.get(rid))).status

    end = time.monotonic() + 30
    while (s := await status()) not in {"succeeded", "failed", "cancelled", "timed_out"}:
        assert time.monotonic() < end, f"run still {s}"
        await asyncio.sleep(0.02)
    assert s == "succeeded"


async def test_stream_cut_before_its_first_event_creates_one_run(orca, flavour):
    # Cut inside the create's response headers: no event (so no run id) has arrived, and the
    # stream posts again with the same Idempotency-Key, which follows the run already made.
    proxy = CuttingProxy(orca.port, after_bytes=60, cuts=1)
    client = make_client(flavour, proxy.url)
    try:
        stream = client.runs.stream(echo_run(20))
        events = await collect(stream)
        assert proxy.cuts_done == 1
        assert_complete(events, history(orca.url, stream.run_id))
        with orca_client.Client(orca.url) as direct:
            assert [str(r.id) for r in direct.runs.list()] == [stream.run_id]
    finally:
        proxy.close()
        await resolve(client.close())


async def test_stream_cancel_cancels_the_run(client):
    stream = client.runs.stream(echo_run(200))
    async for event in each(stream):
        if event.kind == "token":
            break
    await resolve(stream.cancel())
    final = [e async for e in each(client.runs.join(stream.run_id))][-1]
    assert final.kind == "final" and final.data.status == "cancelled"


def response_head_length(url: str, body: dict) -> int:
    """Bytes of the head (status line and headers) of a streamed create's response."""
    import json
    import socket
    from urllib.parse import urlparse

    target = urlparse(url)
    payload = json.dumps(body).encode()
    request = (
        f"POST /v1/runs HTTP/1.1\r\nHost: {target.netloc}\r\nAccept: text/event-stream\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    with socket.create_connection((target.hostname, target.port)) as s:
        s.sendall(request)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = s.recv(4096)
            assert chunk, "the server closed before its headers"
            received += chunk
    return received.index(b"\r\n\r\n") + 4


def test_stream_cut_after_its_headers_follows_the_location_without_posting_again(orca):
    # The create's answer names the run in `Location`; a cut just after the headers (before
    # any event) resumes with GET .../events instead of a second POST.
    head = response_head_length(orca.url, echo_run(20))
    proxy = CuttingProxy(orca.port, after_bytes=head, cuts=1)
    sent: list[tuple[str, str]] = []
    http = httpx.Client(event_hooks={"request": [lambda r: sent.append((r.method, r.url.path))]})
    try:
        with orca_client.Client(proxy.url, http_client=http) as client:
            stream = client.runs.stream(echo_run(21))
            events = list(stream)
        assert proxy.cuts_done == 1
        assert sent == [("POST", "/v1/runs"), ("GET", f"/v1/runs/{stream.run_id}/events")], sent
        assert_complete(events, history(orca.url, stream.run_id))
        with orca_client.Client(orca.url) as direct:
            assert [str(r.id) for r in direct.runs.list(q="word20")] == [stream.run_id]
    finally:
        proxy.close()
        http.close()
