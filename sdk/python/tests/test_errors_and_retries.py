"""Typed errors with the problem document, and retries that honour Retry-After."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

import orca_client

from conftest import resolve, wait_for
from plans import approval_run


async def test_422_carries_every_pointer(client):
    with pytest.raises(orca_client.UnprocessableEntityError) as err:
        await resolve(client.runs.create(input="hi", orchestration="planer", limits={"max_steps": "many"}))
    e = err.value
    assert e.status == 422 and e.code == "validation_failed"
    pointers = {f.pointer for f in e.errors}
    assert {"/orchestration", "/limits/max_steps"} <= pointers
    assert any("did you mean `planner`" in f.message for f in e.errors)
    assert e.retry_after is None and e.problem["status"] == 422


async def test_422_on_a_workflow_names_the_step(client):
    with pytest.raises(orca_client.UnprocessableEntityError) as err:
        await resolve(client.workflows.put("bad", steps=[{"id": "a", "kind": "tool", "input": {"tool": "no.such.tool"}}]))
    assert any(f.pointer.startswith("/steps/0") for f in err.value.errors)


async def test_connection_error_is_typed(flavour):
    port_with_nothing = 9  # discard: nothing listens on loopback
    kw = dict(max_retries=1)
    c = orca_client.Client(f"http://127.0.0.1:{port_with_nothing}", **kw) if flavour == "sync" else orca_client.AsyncClient(f"http://127.0.0.1:{port_with_nothing}", **kw)
    with pytest.raises(orca_client.APIConnectionError):
        await resolve(c.usage.get())
    await resolve(c.close())


QUOTA = {"ORCA_QUOTAS__DEFAULT__RUNNING_RUNS": "1"}


def test_429_without_retries_raises_with_retry_after(orca_factory):
    orca = orca_factory(**QUOTA)
    with orca_client.Client(orca.url, max_retries=0) as client:
        client.runs.create(approval_run())  # holds the one running slot while it waits
        with pytest.raises(orca_client.RateLimitedError) as err:
            client.runs.create(input="second")
    e = err.value
    assert e.status == 429 and e.code == "quota_exceeded" and e.retry_after == 5


class PostLog:
    """Records each POST /v1/runs answer (time, status, Idempotency-Key); on the first 429 it
    frees the quota by answering the waiting run, so the retry can succeed."""

    def __init__(self, url: str, waiting_run: str) -> None:
        self.url, self.waiting_run = url, waiting_run
        self.posts: list[tuple[float, int, str]] = []

    def record(self, response: httpx.Response) -> bool:
        request = response.request
        if request.method != "POST" or request.url.path != "/v1/runs":
            return False
        self.posts.append((time.monotonic(), response.status_code, request.headers["idempotency-key"]))
        return response.status_code == 429 and len(self.posts) == 1

    def free_slot(self) -> None:
        with orca_client.Client(self.url) as other:
            other.runs.input(self.waiting_run, "approve", {"approved": True})
            wait_for(lambda: other.runs.get(self.waiting_run).status == "succeeded", "the waiting run to end")


def assert_retried_after_retry_after(log: PostLog, run) -> None:
    (t1, s1, k1), (t2, s2, k2) = log.posts
    assert (s1, s2) == (429, 201)
    assert k1 == k2, "a retry must send the same Idempotency-Key"
    assert t2 - t1 >= 5.0 - 0.05, f"retried after {t2 - t1:.2f}s, Retry-After said 5"
    assert t2 - t1 < 5.0 + 3.0
    assert run.status in {"queued", "running", "succeeded"}


def test_429_is_retried_after_retry_after_sync(orca_factory):
    orca = orca_factory(**QUOTA)
    with orca_client.Client(orca.url) as setup:
        waiting = str(setup.runs.create(approval_run()).id)
    log = PostLog(orca.url, waiting)

    def hook(response: httpx.Response) -> None:
        if log.record(response):
            log.free_slot()

    http = httpx.Client(event_hooks={"response": [hook]})
    with orca_client.Client(orca.url, http_client=http, max_retries=2) as client:
        run = client.runs.create(input="second")
    http.close()
    assert_retried_after_retry_after(log, run)


async def test_429_is_retried_after_retry_after_async(orca_factory):
    orca = orca_factory(**QUOTA)
    with orca_client.Client(orca.url) as setup:
        waiting = str(setup.runs.create(approval_run()).id)
    log = PostLog(orca.url, waiting)

    async def hook(response: httpx.Response) -> None:
        if log.record(response):
            # Off the event loop, like any blocking work in a hook.
            thread = threading.Thread(target=log.free_slot)
            thread.start()
            thread.join()

    http = httpx.AsyncClient(event_hooks={"response": [hook]})
    client = orca_client.AsyncClient(orca.url, http_client=http)
    run = await client.runs.create(input="second")
    await client.close()
    await http.aclose()
    assert_retried_after_retry_after(log, run)


def test_non_idempotent_post_is_not_retried(orca_factory):
    orca = orca_factory(**QUOTA)
    calls = []
    http = httpx.Client(event_hooks={"response": [lambda r: calls.append(r.request.url.path)]})
    with orca_client.Client(orca.url, http_client=http, max_retries=3) as client:
        client.runs.create(approval_run())
        with pytest.raises(orca_client.RateLimitedError):
            # A POST without an Idempotency-Key (as runs.create never sends) is sent once.
            client._transport(orca_client._transport.Call("POST", "/v1/runs", body={"input": "x"}))
    http.close()
    assert calls.count("/v1/runs") == 2, calls
