"""Every resource against a real server, through the sync and the async client alike."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import orca_client
from orca_client import models

from conftest import collect, resolve
from plans import approval_run, echo_run

WORKFLOW = {"steps": [{"id": "now", "kind": "tool", "input": {"tool": "clock.now", "arguments": {}}}]}


async def test_system(client):
    assert await resolve(client.health()) is True
    assert await resolve(client.ready()) is True
    assert "orca_" in await resolve(client.metrics())


async def test_runs(client):
    run = await resolve(client.runs.create(input="10 + 20 계산해줘", metadata={"team": "docs"}))
    assert isinstance(run, models.Run) and run.metadata == {"team": "docs"}
    done = await resolve(client.runs.run(input="10 + 20 계산해줘", metadata={"team": "docs"}))
    assert done.status == "succeeded" and done.output == "The result is 30."

    detail = await resolve(client.runs.get(str(done.id)))
    assert isinstance(detail, models.RunDetail) and detail.id == done.id
    listed = await collect(client.runs.list(metadata={"team": "docs"}, limit=1))
    assert {r.id for r in listed} == {run.id, done.id}
    assert [r.id for r in await collect(client.runs.list(status="succeeded", q="no such text"))] == []

    events = await resolve(client.runs.events(str(done.id)))
    assert [e.seq for e in events] == list(range(1, len(events) + 1)) and events[-1].kind == "final"
    assert [e.seq for e in await resolve(client.runs.events(str(done.id), after=3))][0] == 4
    steps = await resolve(client.runs.steps(str(done.id)))
    assert any(s.step_id == "tool-1-1" for s in steps)
    assert await resolve(client.runs.plans(str(done.id))) == []
    timeline = await resolve(client.runs.timeline(str(done.id)))
    assert timeline.totals.tool_calls == 1
    assert (await resolve(client.runs.webhook(str(done.id)))).state == "none"

    await resolve(client.runs.delete(str(done.id)))
    with pytest.raises(orca_client.NotFoundError) as err:
        await resolve(client.runs.get(str(done.id)))
    assert err.value.status == 404 and err.value.code == "not_found"


async def test_run_actions(client):
    # A reactive run waiting for input: pause, resume, then a replan makes plan version 2.
    reactive = await resolve(client.runs.create(approval_run("reactive")))
    rid = str(reactive.id)
    await wait_for_async(lambda: _status(client, rid), {"waiting_input"})
    assert (await resolve(client.runs.pause(rid))).id == reactive.id
    assert (await resolve(client.runs.resume(rid))).id == reactive.id
    assert (await resolve(client.runs.replan(rid, message="keep it short"))).id == reactive.id
    await wait_for_async(lambda: _plan_count(client, rid), {2, 3})

    # A fixed run waiting for input: answered, then forked before that step and cancelled.
    run = await resolve(client.runs.create(approval_run()))
    rid = str(run.id)
    await wait_for_async(lambda: _status(client, rid), {"waiting_input"})
    await resolve(client.runs.input(rid, "approve", {"approved": True}))
    await wait_for_async(lambda: _status(client, rid), {"succeeded"})
    assert (await resolve(client.runs.get(rid))).output == {"approved": True}
    checkpoints = await collect(client.runs.checkpoints(rid, limit=1))
    assert checkpoints and [c.id for c in checkpoints] == sorted(c.id for c in checkpoints)
    assert (await resolve(client.runs.plans(rid)))[0].reason == "initial"

    fork = await resolve(client.runs.fork(rid, before_step="approve"))
    assert str(fork.parent.run_id) == rid
    assert [f.id for f in await collect(client.runs.list(parent_id=rid))] == [fork.id]
    await wait_for_async(lambda: _status(client, str(fork.id)), {"waiting_input"})
    await resolve(client.runs.cancel(str(fork.id)))
    await wait_for_async(lambda: _status(client, str(fork.id)), {"cancelled"})
    with pytest.raises(orca_client.ConflictError) as err:
        await resolve(client.runs.cancel(str(fork.id)))
    assert err.value.status == 409 and err.value.code == "conflict"


async def _status(client, rid):
    return (await resolve(client.runs.get(rid))).status


async def _plan_count(client, rid):
    return len(await resolve(client.runs.plans(rid)))


async def wait_for_async(get, expected: set, timeout: float = 30.0):
    """Polls `get()` until its value is in `expected`; fails after `timeout`."""
    end = time.monotonic() + timeout
    while True:
        value = await get()
        if value in expected:
            return value
        assert time.monotonic() < end, f"still {value!r}, expected one of {expected!r}"
        await asyncio.sleep(0.02)


async def test_workflows_versions_labels(client):
    created = await resolve(client.workflows.put("clock", WORKFLOW, message="first", author="tests"))
    assert isinstance(created, models.WorkflowDetail)
    second = {"steps": WORKFLOW["steps"] + [{"id": "again", "kind": "tool", "depends_on": ["now"], "input": {"tool": "clock.now", "arguments": {}}}]}
    await resolve(client.workflows.put("clock", second, message="second"))
    assert "clock" in [w.name for w in await resolve(client.workflows.list())]
    assert len((await resolve(client.workflows.get("clock"))).definition["steps"]) == 2

    versions = await resolve(client.workflows.versions.list("clock"))
    assert [v.version for v in versions.versions] == [2, 1]
    assert (await resolve(client.workflows.versions.get("clock", 1))).message == "first"
    label = await resolve(client.workflows.labels.set("clock", "stable", 1))
    assert label.version == 1
    assert (await resolve(client.workflows.versions.get("clock", "stable"))).version == 1
    diff = await resolve(client.workflows.diff("clock", 1, "latest"))
    assert diff.from_ if hasattr(diff, "from_") else diff
    await resolve(client.workflows.labels.delete("clock", "stable"))
    await resolve(client.workflows.versions.delete("clock", 1))
    assert [v.version for v in (await resolve(client.workflows.versions.list("clock"))).versions] == [2]
    run = await resolve(client.runs.run(input="now", workflow="clock"))
    assert run.status == "succeeded"
    await resolve(client.workflows.delete("clock"))
    with pytest.raises(orca_client.NotFoundError):
        await resolve(client.workflows.get("clock"))


async def test_agents(client):
    agent = await resolve(client.agents.put("helper", instructions="Answer briefly.", tools=["clock.now"]))
    assert agent.name == "helper"
    assert "helper" in [a.name for a in await resolve(client.agents.list())]
    assert (await resolve(client.agents.get("helper"))).definition["instructions"] == "Answer briefly."
    assert (await resolve(client.agents.versions.list("helper"))).latest_version == 1
    await resolve(client.agents.delete("helper"))
    with pytest.raises(orca_client.NotFoundError):
        await resolve(client.agents.get("helper"))


async def test_functions(client):
    fn = await resolve(client.functions.put("shout", prompt="Say {{ input }} loudly"))
    assert fn.name == "shout"
    names = [f.name for f in await resolve(client.functions.list())]
    assert "shout" in names and "planner" in names
    assert (await resolve(client.functions.get("shout"))).name == "shout"
    await resolve(client.functions.put("shout", prompt="Say {{ input }} quietly"))
    assert [v.version for v in (await resolve(client.functions.versions.list("shout"))).versions] == [2, 1]
    await resolve(client.functions.delete("shout"))
    with pytest.raises(orca_client.NotFoundError):
        await resolve(client.functions.get("shout"))


@pytest.fixture
def orca(orca_factory):
    # tools.http_api lets the tests declare an HTTP tool through the API.
    return orca_factory(ORCA_TOOLS__HTTP_API="true")


async def test_tools(client):
    names = [t.name for t in await resolve(client.tools.list())]
    assert "clock.now" in names
    assert (await resolve(client.tools.get("clock.now"))).name == "clock.now"
    tool = await resolve(client.tools.put("weather.current", name="weather.current", url="https://example.com/weather"))
    assert tool.name == "weather.current"
    assert (await resolve(client.tools.versions.list("weather.current"))).latest_version == 1
    await resolve(client.tools.delete("weather.current"))
    with pytest.raises(orca_client.NotFoundError):
        await resolve(client.tools.get("weather.current"))


async def test_schedules(client):
    schedule = await resolve(client.schedules.create(interval_ms=3_600_000, run={"input": "hello"}))
    sid = str(schedule.id)
    assert [str(s.id) for s in await resolve(client.schedules.list())] == [sid]
    assert str((await resolve(client.schedules.get(sid))).id) == sid
    updated = await resolve(client.schedules.update(sid, enabled=False))
    assert updated.enabled is False
    assert (await resolve(client.schedules.fires(sid))).fires == []
    await resolve(client.schedules.delete(sid))
    with pytest.raises(orca_client.NotFoundError):
        await resolve(client.schedules.get(sid))


async def test_sessions(client):
    await resolve(client.runs.run(input="first turn", session_id="chat-1"))
    session = await resolve(client.sessions.update("chat-1", {"topic": "cats", "old": None}))
    assert session.variables == {"topic": "cats"}
    assert "chat-1" in [s.id for s in await collect(client.sessions.list(limit=1))]
    assert (await resolve(client.sessions.get("chat-1"))).variables == {"topic": "cats"}
    history = await resolve(client.sessions.history("chat-1"))
    assert len(history.turns) == 1
    await resolve(client.sessions.delete("chat-1"))
    assert "chat-1" not in [s.id for s in await collect(client.sessions.list())]


async def test_memory_and_users(client):
    user = f"u-{time.time_ns()}"  # both clients share the server: a user of this test's own
    notes = f"user/{user}/notes"
    item = await resolve(client.memory.put(notes, "tea", "Likes sencha in the morning"))
    assert isinstance(item, models.MemoryItem) and item.revision == 1 and item.user_id == user
    assert (await resolve(client.memory.get(notes, "tea"))).value == "Likes sencha in the morning"
    await resolve(client.memory.put(notes, "city", {"name": "Lisbon"}, ttl_seconds=3600))
    listed = await collect(client.memory.list(f"user/{user}", limit=1))
    assert [i.key for i in listed] == ["city", "tea"]
    found = await resolve(client.memory.search(f"user/{user}", "which sencha in the morning?", mode="text"))
    assert found.mode == "text" and [i.key for i in found.items] == ["tea"]
    await resolve(client.runs.run(input="hi", user_id=user, session_id=f"s-{user}"))
    export = await resolve(client.users.export(user))
    assert len(export.runs) == 1 and [i.key for i in export.memory] == ["city", "tea"]
    erased = await resolve(client.users.erase(user))
    assert (erased.runs, erased.sessions, erased.memory_items) == (1, 1, 2)
    with pytest.raises(orca_client.NotFoundError):
        await resolve(client.memory.get(notes, "tea"))
    await resolve(client.memory.put("shared/kb", f"k-{user}", 1))
    await resolve(client.memory.delete("shared/kb", f"k-{user}"))


async def test_usage_and_models(client):
    usage = await resolve(client.usage.get())
    assert usage.tenant == "default"
    models_ = await resolve(client.models.list())
    assert any(m.default for m in models_)


async def test_definitions(client):
    files = [{"path": "workflows/tick.json", "content": json.dumps(WORKFLOW)}]
    result = await resolve(client.definitions.apply(files=files, message="from tests"))
    assert [c.action for c in result.changes] == ["created"]
    bundle = await resolve(client.definitions.export())
    assert "workflows/tick.json" in [f.path for f in bundle.files]
    again = await resolve(client.definitions.apply(files=[f.model_dump() for f in bundle.files]))
    assert all(c.action == "unchanged" for c in again.changes)


async def test_definitions_from_the_generated_schema_models(client):
    # orca_client.schemas: models generated from schemas/*.schema.json, usable as PUT bodies.
    from orca_client.schemas.Agent_schema import Agent
    from orca_client.schemas.AgentPlan_schema import Step
    from orca_client.schemas.FixedWorkflow_schema import FixedWorkflow

    workflow = FixedWorkflow(name="clock", steps=[Step(id="now", kind="tool", input={"tool": "clock.now", "arguments": {}})])
    stored = await resolve(client.workflows.put("clock", workflow))
    assert stored.definition["steps"][0]["id"] == "now"
    assert (await resolve(client.runs.run(input="now", workflow="clock"))).status == "succeeded"
    agent = await resolve(client.agents.put("helper", Agent(name="helper", instructions="Answer briefly.")))
    assert agent.definition["instructions"] == "Answer briefly."
    with pytest.raises(ValueError):
        Step(id="x", kind="no-such-kind", input={})


def test_run_of_a_workflow_at_a_label_reads_back(orca):
    # openapi.yaml's RunRequest.workflow once refused `name@label` in the run object read back.
    with orca_client.Client(orca.url) as client:
        client.workflows.put("clock", WORKFLOW)
        client.workflows.labels.set("clock", "stable", 1)
        for ref in ("clock@latest", "clock@1", "clock@stable"):
            run = client.runs.run(input="now", workflow=ref)
            assert run.status == "succeeded" and run.request.workflow == ref


async def test_workers_and_tasks(client):
    """A worker's round through the low-level calls: poll, heartbeat, complete; a second
    completion refused with its reason; the task and the worker listed."""
    tool = {"queue": "py-sdk", "input_schema": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}}
    await resolve(client.tools.put("sdk.shout", tool))
    plan = {"steps": [{"id": "s", "kind": "tool", "input": {"tool": "sdk.shout", "arguments": {"text": "hi"}}}]}
    run = await resolve(client.runs.create(input="x", orchestration="fixed", plan=plan))
    tasks: list = []
    while not tasks:
        tasks = await resolve(client.workers.poll(worker_id="py-1", queue="py-sdk", wait_ms=5000))
    task = tasks[0]
    assert (task.tool, task.arguments, task.attempt) == ("sdk.shout", {"text": "hi"}, 1)
    lease = await resolve(client.tasks.heartbeat(task.id, worker_id="py-1", progress="half"))
    assert lease.lease_expires_at is not None
    done = await resolve(client.tasks.complete(task.id, worker_id="py-1", output={"text": "HI"}))
    assert done.status == "completed"
    with pytest.raises(orca_client.ConflictError) as refused:
        await resolve(client.tasks.complete(task.id, worker_id="py-1", output="again"))
    assert refused.value.problem.get("reason") == "task_finished"
    finished = await resolve(client.runs.join(run.id).final_run())
    assert (finished.status, finished.output) == ("succeeded", {"text": "HI"})
    listed = await collect(client.tasks.list(run_id=run.id))
    assert [t.id for t in listed] == [task.id]
    workers = await resolve(client.workers.list())
    assert any(w.worker_id == "py-1" and "py-sdk" in w.queues for w in workers)
