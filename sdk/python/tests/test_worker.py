"""The worker library (`orca_client.worker`) in real worker processes against a real orca:
the example worker (examples/workers/python/worker.py) runs as a subprocess, writes one JSON
line per thing it did, and the tests read that log and the server's runs and tasks.

Covered: the declaration PUT from type hints; calls at the top level and inside `sequential`
and `parallel`; a kill -9 of a worker mid-task (offered again, same idempotency key); three
processes sharing 300 tasks, each done once; a cancelled run reaching a plain and an async
tool; a SIGTERM handing a task back after the grace, or letting it finish within it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, TypedDict

import pytest

import orca_client
from orca_client.worker import TaskContext, Worker, schema_from_hints

from conftest import DEADLINE, OrcaServer, wait_for

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "workers" / "python" / "worker.py"


class WorkerProcess:
    """One run of the example worker, its log a JSON-lines file."""

    def __init__(self, orca: OrcaServer, log: Path, name: str, **env: str) -> None:
        self.name = name
        self.log = log
        self.stderr = log.parent / f"{name}.stderr"
        environ = {
            **os.environ,
            "ORCA_URL": orca.url,
            "ORCA_WORKER_LOG": str(log),
            "ORCA_WORKER_ID": name,
            **env,
        }
        environ.pop("ORCA_API_KEY", None)
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE)], env=environ, stdout=subprocess.DEVNULL, stderr=open(self.stderr, "wb")
        )

    def polling(self, client: orca_client.Client) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"worker {self.name} exited: {self.stderr.read_text()[-2000:]}")
        return any(w.worker_id == self.name for w in client.workers.list())

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def lines(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.fixture
def workers(orca: OrcaServer, tmp_path: Path):
    """`workers(name, **env)` starts the example worker; every one is killed at the end."""
    started: list[WorkerProcess] = []
    log = tmp_path / "worker.jsonl"

    def start(name: str, **env: str) -> WorkerProcess:
        process = WorkerProcess(orca, log, name, **env)
        started.append(process)
        with orca_client.Client(orca.url) as client:
            wait_for(lambda: process.polling(client), f"worker {name} to poll")
        return process

    start.log = log  # type: ignore[attr-defined]
    yield start
    for process in started:
        process.close()


def call(id: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"id": id, "kind": "tool", "input": {"tool": tool, "arguments": arguments}}


def start_run(client: orca_client.Client, *steps: dict[str, Any]) -> str:
    run = client.runs.create(input="x", orchestration="fixed", plan={"steps": list(steps)})
    return run.id


def test_the_declaration_comes_from_the_type_hints_and_calls_at_every_level_succeed(orca, workers):
    workers("w-1")
    with orca_client.Client(orca.url) as client:
        shout = client.tools.get("text.shout")
        assert shout.kind == "worker" and shout.worker is not None
        declared = shout.worker
        assert declared["queue"] == "examples"
        assert declared["input_schema"] == {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "The text to upper-case."},
                "hold_first": {
                    "type": "number",
                    "description": "Seconds to work on the first attempt (to show heartbeats).",
                    "default": 0,
                },
            },
            "required": ["text"],
            "additionalProperties": False,
        }
        assert declared["heartbeat_ms"] == 1000
        run = client.runs.run(
            input="x",
            orchestration="fixed",
            plan={
                "steps": [
                    call("top", "text.shout", text="top"),
                    {"id": "seq", "kind": "sequential", "input": {"steps": [call("inner", "text.count", text="a b c")]}},
                    {
                        "id": "par",
                        "kind": "parallel",
                        "input": {"steps": [call("p1", "text.shout", text="left"), call("p2", "text.count", text="abcd", unit="chars")]},
                    },
                ]
            },
        )
        assert run.status == "succeeded", run
        steps = {s.step_id: s for s in client.runs.steps(run.id)}
        outputs = {k: steps[k].output for k in ("top", "inner", "p1", "p2")}
        assert outputs == {"top": {"text": "TOP"}, "inner": {"count": 3}, "p1": {"text": "LEFT"}, "p2": {"count": 4}}
        # The schema from the hints refuses, at creation, arguments the function does not take.
        with pytest.raises(orca_client.UnprocessableEntityError) as refused:
            start_run(client, call("b", "text.shout", txt="no"))
        assert {e.pointer for e in refused.value.errors} == {"/plan/steps/0/input/arguments"}
    assert sorted(line["event"] for line in lines(workers.log)) == ["done"] * 4 + ["start"] * 4


def test_a_worker_killed_mid_task_loses_it_to_another_with_the_same_key(orca, workers):
    first = workers("w-first")
    with orca_client.Client(orca.url) as client:
        run_id = start_run(client, call("s", "text.shout", text="once", hold_first=60))
        wait_for(lambda: any(line["event"] == "start" for line in lines(workers.log)), "the first attempt")
        first.kill()
        workers("w-second")
        run = client.runs.join(run_id).final_run()
        assert run.status == "succeeded" and run.output == {"text": "ONCE"}
        [task] = list(client.tasks.list(run_id=run_id))
        assert (task.status, task.attempt) == ("completed", 2)
    starts = [line for line in lines(workers.log) if line["event"] == "start"]
    assert [(s["worker"], s["attempt"]) for s in starts] == [("w-first", 1), ("w-second", 2)]
    assert starts[0]["key"] == starts[1]["key"] == task.idempotency_key


def test_three_worker_processes_share_300_tasks_and_do_each_once(orca, workers):
    for i in range(3):
        workers(f"w-{i}", ORCA_WORKER_CONCURRENCY="8")
    with orca_client.Client(orca.url) as client:
        ids = [
            start_run(client, {"id": "fan", "kind": "parallel", "input": {"steps": [call(f"c{j}", "text.shout", text=f"{i}-{j}") for j in range(10)]}})
            for i in range(30)
        ]
        for run_id in ids:
            assert client.runs.join(run_id).final_run().status == "succeeded"
        tasks = list(client.tasks.list())
    assert len(tasks) == 300 and all(t.status == "completed" and t.attempt == 1 for t in tasks)
    done = [line for line in lines(workers.log) if line["event"] == "done"]
    assert Counter(line["key"] for line in done) == Counter({t.idempotency_key: 1 for t in tasks})
    assert len({line["worker"] for line in done}) == 3, "every process took a share"


@pytest.mark.parametrize("tool", ["text.shout", "text.count"])
def test_cancelling_the_run_reaches_the_running_function(orca, workers, tool):
    workers("w-1")
    with orca_client.Client(orca.url) as client:
        run_id = start_run(client, call("s", tool, text="long", hold_first=60))
        wait_for(lambda: any(line["event"] == "start" for line in lines(workers.log)), "the task to start")
        client.runs.cancel(run_id)
        cancelled = wait_for(
            lambda: [line for line in lines(workers.log) if line["event"] == "cancelled"], "the function to hear of it"
        )
        assert cancelled[0]["reason"] == "task_cancelled"
        [task] = list(client.tasks.list(run_id=run_id))
        assert task.status == "cancelled"
        assert client.runs.get(run_id).status == "cancelled"
    assert not [line for line in lines(workers.log) if line["event"] == "done"]


def test_sigterm_hands_a_task_back_after_the_grace(orca, workers):
    first = workers("w-first", ORCA_WORKER_GRACE="0.3")
    with orca_client.Client(orca.url) as client:
        run_id = start_run(client, call("s", "text.shout", text="handed", hold_first=60))
        wait_for(lambda: any(line["event"] == "start" for line in lines(workers.log)), "the task to start")
        assert first.terminate() == 0
        [task] = list(client.tasks.list(run_id=run_id))
        assert task.status == "queued" and task.error is not None and task.error.code == "worker_shutdown"
        workers("w-second")
        run = client.runs.join(run_id).final_run()
        assert run.status == "succeeded" and run.output == {"text": "HANDED"}
        [task] = list(client.tasks.list(run_id=run_id))
        assert (task.status, task.attempt) == ("completed", 2)
    events = [(line["worker"], line["event"]) for line in lines(workers.log)]
    assert events == [("w-first", "start"), ("w-first", "cancelled"), ("w-second", "start"), ("w-second", "done")]


def test_sigterm_within_the_grace_lets_the_task_finish(orca, workers):
    first = workers("w-first", ORCA_WORKER_GRACE="30")
    with orca_client.Client(orca.url) as client:
        run_id = start_run(client, call("s", "text.shout", text="kept", hold_first=1.5))
        wait_for(lambda: any(line["event"] == "start" for line in lines(workers.log)), "the task to start")
        assert first.terminate() == 0
        run = client.runs.join(run_id).final_run()
        assert run.status == "succeeded" and run.output == {"text": "KEPT"}
        [task] = list(client.tasks.list(run_id=run_id))
        assert (task.status, task.attempt) == ("completed", 1)
    assert [line["event"] for line in lines(workers.log)] == ["start", "done"]


class Address(TypedDict):
    city: str
    zip: Optional[str]


def test_schemas_from_hints_cover_the_common_types():
    def book(
        guests: int,
        city: Annotated[str, "Where."],
        kind: Literal["hotel", "flat"],
        tags: list[str],
        address: Address,
        ctx: TaskContext,
        notes: dict[str, int] | None = None,
        rate: float = 1.5,
    ) -> None: ...

    assert schema_from_hints(book) == {
        "type": "object",
        "properties": {
            "guests": {"type": "integer"},
            "city": {"type": "string", "description": "Where."},
            "kind": {"enum": ["hotel", "flat"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                "additionalProperties": False,
                "required": ["city", "zip"],
            },
            "notes": {
                "anyOf": [{"type": "object", "additionalProperties": {"type": "integer"}}, {"type": "null"}],
                "default": None,
            },
            "rate": {"type": "number", "default": 1.5},
        },
        "required": ["guests", "city", "kind", "tags", "address"],
        "additionalProperties": False,
    }

    def unknown(when: complex) -> None: ...

    with pytest.raises(TypeError, match="unknown\\(when\\)"):
        schema_from_hints(unknown)

    worker = Worker(queue="q")
    with pytest.raises(ValueError, match="dotted lowercase"):
        worker.tool(name="NoDots")(lambda: None)


async def test_an_output_the_server_refuses_fails_the_task_at_once(orca):
    """An output over the server's body limit would be refused on every attempt: the task fails
    at once (`output_too_large`), not left claimed to lapse and run again."""
    from orca_client.worker import Retry

    async with orca_client.AsyncClient(orca.url) as client:
        worker = Worker(queue="big", client=client, grace=1)

        @worker.tool(name="big.blob", retry=Retry(max_attempts=3, backoff_ms=10))
        def blob(n: int) -> str:
            return "x" * n

        await worker.adeclare()
        serving = asyncio.ensure_future(worker.arun())
        run = await client.runs.create(input="x", orchestration="fixed", plan={"steps": [call("b", "big.blob", n=2_000_000)]})
        ended = await asyncio.wait_for(client.runs.join(run.id).final_run(), DEADLINE)
        assert ended.status == "failed"
        tasks = [t async for t in client.tasks.list(run_id=run.id)]
        assert [(t.status, t.attempt, t.error.code if t.error else None) for t in tasks] == [
            ("failed", 1, "output_too_large")
        ]
        worker.stop()
        await asyncio.wait_for(serving, DEADLINE)


async def test_a_stopping_worker_gives_up_its_reports_when_orca_is_unreachable(orca):
    """orca killed while a task runs: the hand-back cannot be delivered, and the worker still
    ends within its grace plus 5 s instead of retrying forever."""
    client = orca_client.AsyncClient(orca.url, max_retries=0)
    worker = Worker(queue="gone", client=client, grace=0.3)
    started = asyncio.Event()

    @worker.tool(name="gone.wait")
    async def wait(ctx: TaskContext) -> str:
        started.set()
        await asyncio.sleep(60)
        return "late"

    await worker.adeclare()
    serving = asyncio.ensure_future(worker.arun())
    await client.runs.create(input="x", orchestration="fixed", plan={"steps": [call("w", "gone.wait")]})
    await asyncio.wait_for(started.wait(), DEADLINE)
    orca.kill()
    began = time.monotonic()
    worker.stop()
    await asyncio.wait_for(serving, DEADLINE)
    assert time.monotonic() - began < 0.3 + 5 + 3
    await client.close()
