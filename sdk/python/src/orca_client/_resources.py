"""The API's resources. Each method describes one HTTP exchange as a `Call` and hands it to
the client's transport: a `Client` returns the answer, an `AsyncClient` an awaitable of it.
Lists that page return a lazy `Pager`/`AsyncPager`; streams a `RunStream`/`AsyncRunStream`.
"""

from __future__ import annotations

import builtins

from datetime import datetime
from typing import Any, Callable, Mapping
from urllib.parse import quote

from . import models
from ._paging import AsyncPager, Pager, after_id_pages, cursor_pages
from ._sse import parse_event
from ._streaming import DEFAULT_RECONNECTS, AsyncRunStream, RunStream
from ._transport import TEXT, AsyncTransport, Call, Decoder, with_idempotency_key


def _seg(value: Any) -> str:
    """A path segment, escaped (a name or id never changes the path's shape)."""
    return quote(str(value), safe="")


def _body(body: Any, fields: Mapping[str, Any]) -> Any:
    """A request body from a dict/model and/or keyword fields (keywords win)."""
    if not fields:
        return body if body is not None else {}
    if body is None:
        return dict(fields)
    if hasattr(body, "model_dump"):
        body = body.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return {**body, **fields}


def _list_of(item_type: Any) -> Any:
    """`list[item_type]` for a type known at run time (a registry's summary model)."""
    return list[item_type]  # type: ignore[valid-type]


def _events(items: list[Any]) -> builtins.list[Any]:
    return [parse_event(item) for item in items]


class _Resource:
    def __init__(self, transport: Any) -> None:
        self._t = transport
        self._async = isinstance(transport, AsyncTransport)

    def _pager(self, call: Call, read: Any) -> Any:
        return (AsyncPager if self._async else Pager)(self._t, call, read)


class Runs(_Resource):
    """`client.runs`: create, follow, query and steer runs."""

    def create(self, body: Any = None, /, *, idempotency_key: str | None = None, **fields: Any) -> models.Run:
        """Start a run in the background (201). Retried safely: an `Idempotency-Key` is sent
        (a new UUID unless given), the same on every retry, so a retry never makes a second run."""
        headers = with_idempotency_key(idempotency_key)
        return self._t(Call("POST", "/v1/runs", body=_body(body, fields), headers=headers, cast=models.Run))

    def get(self, run_id: str) -> models.RunDetail:
        return self._t(Call("GET", f"/v1/runs/{_seg(run_id)}", cast=models.RunDetail))

    def list(
        self,
        *,
        status: models.RunStatus | None = None,
        completion: models.Completion | None = None,
        orchestration: models.Orchestration | None = None,
        session_id: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        q: str | None = None,
        parent_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        limit: int | None = None,
    ) -> Pager[models.Run]:
        """Every run matching the filters, newest first, fetched a page (`limit`) at a time."""
        params: dict[str, Any] = {
            "status": status,
            "completion": completion,
            "orchestration": orchestration,
            "session_id": session_id,
            "created_after": created_after,
            "created_before": created_before,
            "q": q,
            "parent_id": parent_id,
            "limit": limit,
        }
        for key, value in (metadata or {}).items():
            params[f"metadata.{key}"] = value
        call = Call("GET", "/v1/runs", params, cast=models.RunList)
        return self._pager(call, cursor_pages("runs"))

    def delete(self, run_id: str) -> None:
        return self._t(Call("DELETE", f"/v1/runs/{_seg(run_id)}"))

    def cancel(self, run_id: str) -> models.Run:
        return self._t(Call("POST", f"/v1/runs/{_seg(run_id)}/cancel", cast=models.Run))

    def input(self, run_id: str, step_id: str, value: Any) -> models.Run:
        """Answer an `input_required` event of step `step_id`."""
        body = {"step_id": step_id, "value": value}
        return self._t(Call("POST", f"/v1/runs/{_seg(run_id)}/input", body=body, cast=models.Run))

    def replan(self, run_id: str, body: Any = None, /, **fields: Any) -> models.Run:
        """Ask a reactive run for a new plan: `message=...` or `restore_version=N`."""
        return self._t(Call("POST", f"/v1/runs/{_seg(run_id)}/replan", body=_body(body, fields), cast=models.Run))

    def fork(self, run_id: str, body: Any = None, /, *, idempotency_key: str | None = None, **fields: Any) -> models.Run:
        """A new run from one of this run's checkpoints (`checkpoint=` or `before_step=`)."""
        headers = with_idempotency_key(idempotency_key)
        call = Call("POST", f"/v1/runs/{_seg(run_id)}/fork", body=_body(body, fields), headers=headers, cast=models.Run)
        return self._t(call)

    def pause(self, run_id: str) -> models.Run:
        return self._t(Call("POST", f"/v1/runs/{_seg(run_id)}/pause", cast=models.Run))

    def resume(self, run_id: str) -> models.Run:
        return self._t(Call("POST", f"/v1/runs/{_seg(run_id)}/resume", cast=models.Run))

    def events(self, run_id: str, *, after: int | None = None) -> builtins.list[models.Event]:
        """The run's stored history (events after `after`) as typed events."""
        call = Call("GET", f"/v1/runs/{_seg(run_id)}/events", {"after": after}, cast=Decoder(list[Any], _events))
        return self._t(call)

    def steps(self, run_id: str) -> builtins.list[models.StepView]:
        return self._t(Call("GET", f"/v1/runs/{_seg(run_id)}/steps", cast=list[models.StepView]))

    def plans(self, run_id: str) -> builtins.list[models.PlanRecord]:
        return self._t(Call("GET", f"/v1/runs/{_seg(run_id)}/plans", cast=list[models.PlanRecord]))

    def checkpoints(self, run_id: str, *, limit: int | None = None) -> Pager[models.Checkpoint]:
        """Every checkpoint, oldest first, fetched a page (`limit`) at a time."""
        call = Call("GET", f"/v1/runs/{_seg(run_id)}/checkpoints", {"limit": limit}, cast=list[models.Checkpoint])
        return self._pager(call, after_id_pages)

    def timeline(self, run_id: str) -> models.Timeline:
        return self._t(Call("GET", f"/v1/runs/{_seg(run_id)}/timeline", cast=models.Timeline))

    def webhook(self, run_id: str) -> models.WebhookDelivery:
        return self._t(Call("GET", f"/v1/runs/{_seg(run_id)}/webhook", cast=models.WebhookDelivery))

    def stream(
        self,
        body: Any = None,
        /,
        *,
        on_input: Callable[[models.InputRequiredData], Any] | None = None,
        idempotency_key: str | None = None,
        max_reconnects: int = DEFAULT_RECONNECTS,
        **fields: Any,
    ) -> RunStream:
        """Create a run and follow its events to `final`, reconnecting when the connection drops.

        `on_input(data)` answers each `input_required` event with the value it returns."""
        key = with_idempotency_key(idempotency_key)["Idempotency-Key"]
        cls: Any = AsyncRunStream if self._async else RunStream
        return cls(
            self._t,
            create_body=_body(body, fields),
            idempotency_key=key,
            on_input=on_input,
            max_reconnects=max_reconnects,
        )

    def join(
        self,
        run_id: str,
        *,
        after: int = 0,
        on_input: Callable[[models.InputRequiredData], Any] | None = None,
        max_reconnects: int = DEFAULT_RECONNECTS,
    ) -> RunStream:
        """Follow an existing run's events after seq `after` (0: from the first) to `final`."""
        cls: Any = AsyncRunStream if self._async else RunStream
        return cls(self._t, run_id=str(run_id), after=after, on_input=on_input, max_reconnects=max_reconnects)

    def run(
        self,
        body: Any = None,
        /,
        *,
        on_input: Callable[[models.InputRequiredData], Any] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> models.RunDetail:
        """Create a run, answer its input through `on_input`, and return it once it has ended."""
        return self.stream(body, on_input=on_input, idempotency_key=idempotency_key, **fields).final_run()


class Versions(_Resource):
    """`client.<kind>.versions`: the stored versions of a definition."""

    def __init__(self, transport: Any, kind: str) -> None:
        super().__init__(transport)
        self._kind = kind

    def list(self, name: str) -> models.VersionList:
        return self._t(Call("GET", f"/v1/{self._kind}/{_seg(name)}/versions", cast=models.VersionList))

    def get(self, name: str, version: int | str) -> models.VersionDetail:
        """A version number, a label, or `latest`."""
        path = f"/v1/{self._kind}/{_seg(name)}/versions/{_seg(version)}"
        return self._t(Call("GET", path, cast=models.VersionDetail))

    def delete(self, name: str, version: int) -> None:
        return self._t(Call("DELETE", f"/v1/{self._kind}/{_seg(name)}/versions/{_seg(version)}"))


class Labels(_Resource):
    """`client.<kind>.labels`: names pointing at versions (`name@label` in a run)."""

    def __init__(self, transport: Any, kind: str) -> None:
        super().__init__(transport)
        self._kind = kind

    def set(self, name: str, label: str, version: int) -> models.LabelDetail:
        """Point `label` at `version` (created, or moved atomically)."""
        path = f"/v1/{self._kind}/{_seg(name)}/labels/{_seg(label)}"
        return self._t(Call("PUT", path, body={"version": version}, cast=models.LabelDetail))

    def delete(self, name: str, label: str) -> None:
        return self._t(Call("DELETE", f"/v1/{self._kind}/{_seg(name)}/labels/{_seg(label)}"))


class _Definitions(_Resource):
    """A versioned registry: `list`, `get`, `put`, `delete`, `versions`, `labels`, `diff`."""

    kind = ""
    summary: Any = None
    detail: Any = None

    def __init__(self, transport: Any) -> None:
        super().__init__(transport)
        self.versions = Versions(transport, self.kind)
        self.labels = Labels(transport, self.kind)

    def list(self) -> builtins.list[Any]:
        return self._t(Call("GET", f"/v1/{self.kind}", cast=_list_of(self.summary)))

    def get(self, name: str) -> Any:
        return self._t(Call("GET", f"/v1/{self.kind}/{_seg(name)}", cast=self.detail))

    def put(self, name: str, body: Any = None, /, *, message: str | None = None, author: str | None = None, **fields: Any) -> Any:
        """Create or replace; a change is stored as a new version (`message`, `author` kept with it)."""
        params = {"message": message, "author": author}
        return self._t(Call("PUT", f"/v1/{self.kind}/{_seg(name)}", params, body=_body(body, fields), cast=self.detail))

    def delete(self, name: str) -> None:
        return self._t(Call("DELETE", f"/v1/{self.kind}/{_seg(name)}"))

    def diff(self, name: str, from_: int | str, to: int | str | None = None) -> models.VersionDiff:
        """What changed from version (or label) `from_` to `to` (default: the latest)."""
        params = {"from": from_, "to": to}
        return self._t(Call("GET", f"/v1/{self.kind}/{_seg(name)}/diff", params, cast=models.VersionDiff))


class Workflows(_Definitions):
    kind, summary, detail = "workflows", models.WorkflowSummary, models.WorkflowDetail


class Agents(_Definitions):
    kind, summary, detail = "agents", models.AgentSummary, models.AgentDetail


class Tools(_Definitions):
    kind, summary, detail = "tools", models.ToolInfo, models.ToolDetail


class Functions(_Definitions):
    kind, summary, detail = "functions", models.FunctionInfo, models.FunctionDetail


class Schedules(_Resource):
    def list(self) -> builtins.list[models.Schedule]:
        cast = Decoder(models.ScheduleList, lambda page: list(page.schedules))
        return self._t(Call("GET", "/v1/schedules", cast=cast))

    def create(self, body: Any = None, /, **fields: Any) -> models.Schedule:
        """`cron=` (and `timezone=`) or `interval_ms=`, and the `run=` body to start."""
        return self._t(Call("POST", "/v1/schedules", body=_body(body, fields), cast=models.Schedule))

    def get(self, schedule_id: str) -> models.Schedule:
        return self._t(Call("GET", f"/v1/schedules/{_seg(schedule_id)}", cast=models.Schedule))

    def update(self, schedule_id: str, body: Any = None, /, **fields: Any) -> models.Schedule:
        call = Call("PATCH", f"/v1/schedules/{_seg(schedule_id)}", body=_body(body, fields), cast=models.Schedule)
        return self._t(call)

    def delete(self, schedule_id: str) -> None:
        return self._t(Call("DELETE", f"/v1/schedules/{_seg(schedule_id)}"))

    def fires(self, schedule_id: str) -> models.ScheduleFires:
        return self._t(Call("GET", f"/v1/schedules/{_seg(schedule_id)}/fires", cast=models.ScheduleFires))


class Sessions(_Resource):
    def list(self, *, limit: int | None = None) -> Pager[models.SessionListItem]:
        call = Call("GET", "/v1/sessions", {"limit": limit}, cast=models.SessionList)
        return self._pager(call, cursor_pages("sessions"))

    def get(self, session_id: str) -> models.Session:
        return self._t(Call("GET", f"/v1/sessions/{_seg(session_id)}", cast=models.Session))

    def update(self, session_id: str, variables: Mapping[str, Any]) -> models.Session:
        """Set variables; a `None` value deletes that variable."""
        body = {"variables": dict(variables)}
        return self._t(Call("PATCH", f"/v1/sessions/{_seg(session_id)}", body=body, cast=models.Session))

    def delete(self, session_id: str) -> None:
        return self._t(Call("DELETE", f"/v1/sessions/{_seg(session_id)}"))

    def history(self, session_id: str) -> models.SessionHistory:
        return self._t(Call("GET", f"/v1/sessions/{_seg(session_id)}/history", cast=models.SessionHistory))


def _namespace(namespace: str) -> str:
    """A memory namespace as a path: each segment escaped, joined by `/`."""
    return "/".join(_seg(part) for part in namespace.split("/"))


class Memory(_Resource):
    """`client.memory`: items by namespace and key (`user/ID/...`, `session/ID/...`, the
    tenant's own), listed by prefix and searched by text or meaning."""

    def put(self, namespace: str, key: str, value: Any, *, ttl_seconds: int | None = None) -> models.MemoryItem:
        """Store `value` (any JSON) under `key`, replacing what was there; `ttl_seconds` forgets it."""
        body: dict[str, Any] = {"value": value}
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        path = f"/v1/memory/{_namespace(namespace)}/{_seg(key)}"
        return self._t(Call("PUT", path, body=body, cast=models.MemoryItem))

    def get(self, namespace: str, key: str) -> models.MemoryItem:
        return self._t(Call("GET", f"/v1/memory/{_namespace(namespace)}/{_seg(key)}", cast=models.MemoryItem))

    def delete(self, namespace: str, key: str) -> None:
        return self._t(Call("DELETE", f"/v1/memory/{_namespace(namespace)}/{_seg(key)}"))

    def list(
        self, namespace: str, *, key_prefix: str | None = None, limit: int | None = None
    ) -> Pager[models.MemoryItem]:
        """The items of `namespace` and the namespaces below it, by namespace then key."""
        params = {"namespace": namespace, "key_prefix": key_prefix, "limit": limit}
        return self._pager(Call("GET", "/v1/memory", params, cast=models.MemoryList), cursor_pages("items"))

    def search(
        self, namespace: str, query: str, *, limit: int | None = None, mode: str | None = None
    ) -> models.SearchResult:
        """The items closest to `query`, best first; `mode`: `auto`, `text` or `meaning`."""
        body: dict[str, Any] = {"namespace": namespace, "query": query}
        if limit is not None:
            body["limit"] = limit
        if mode is not None:
            body["mode"] = mode
        return self._t(Call("POST", "/v1/memory/search", body=body, cast=models.SearchResult))


class Users(_Resource):
    """`client.users`: a user's data, exported or erased whole."""

    def export(self, user_id: str) -> models.UserExport:
        return self._t(Call("GET", f"/v1/users/{_seg(user_id)}/export", cast=models.UserExport))

    def erase(self, user_id: str) -> models.UserErased:
        """Their runs, the sessions of those runs and their memory, in one transaction (409 while
        a run of theirs is unfinished)."""
        return self._t(Call("DELETE", f"/v1/users/{_seg(user_id)}", cast=models.UserErased))


class Usage(_Resource):
    def get(self) -> models.TenantUsage:
        return self._t(Call("GET", "/v1/usage", cast=models.TenantUsage))


class Workers(_Resource):
    """`client.workers`: the workers that polled, and the long poll a worker makes."""

    def list(self) -> builtins.list[models.WorkerView]:
        """Workers of the caller's tenant that polled in the last five minutes."""
        cast = Decoder(models.WorkerList, lambda page: list(page.workers))
        return self._t(Call("GET", "/v1/workers", cast=cast))

    def poll(
        self,
        *,
        worker_id: str,
        queue: str,
        tools: builtins.list[str] | None = None,
        max_tasks: int = 1,
        wait_ms: int = 30_000,
    ) -> builtins.list[models.TaskView]:
        """Claims up to `max_tasks` tasks of `queue` for `worker_id`, waiting up to `wait_ms`
        for one (the client's read timeout must be longer). Not retried: a lost answer's tasks
        come back once their leases lapse."""
        body = {"worker_id": worker_id, "queue": queue, "tools": tools or [], "max_tasks": max_tasks, "wait_ms": wait_ms}
        cast = Decoder(models.Polled, lambda page: list(page.tasks))
        return self._t(Call("POST", "/v1/workers/poll", body=body, cast=cast))


class Tasks(_Resource):
    """`client.tasks`: worker tools' tasks, and a worker's reports on the one it holds."""

    def list(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        tool: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> Pager[models.TaskView]:
        params = {"status": status, "queue": queue, "tool": tool, "run_id": run_id, "limit": limit}
        call = Call("GET", "/v1/tasks", params, cast=models.TaskList)
        return self._pager(call, cursor_pages("tasks"))

    def get(self, task_id: str) -> models.TaskView:
        return self._t(Call("GET", f"/v1/tasks/{_seg(task_id)}", cast=models.TaskView))

    def heartbeat(self, task_id: str, *, worker_id: str, progress: Any = None) -> models.Lease:
        """Extends the claim; `progress` reaches the run's clients. A 409 `Conflict` whose
        `reason` is `task_cancelled` means: stop working."""
        body: dict[str, Any] = {"worker_id": worker_id}
        if progress is not None:
            body["progress"] = progress
        return self._t(Call("POST", f"/v1/tasks/{_seg(task_id)}/heartbeat", body=body, cast=models.Lease))

    def complete(self, task_id: str, *, worker_id: str, output: Any) -> models.TaskView:
        body = {"worker_id": worker_id, "output": output}
        return self._t(Call("POST", f"/v1/tasks/{_seg(task_id)}/complete", body=body, cast=models.TaskView))

    def fail(
        self, task_id: str, *, worker_id: str, code: str, message: str, retryable: bool = True
    ) -> models.TaskView:
        body = {"worker_id": worker_id, "error": {"code": code, "message": message}, "retryable": retryable}
        return self._t(Call("POST", f"/v1/tasks/{_seg(task_id)}/fail", body=body, cast=models.TaskView))


class Models(_Resource):
    def list(self) -> builtins.list[models.ModelInfo]:
        return self._t(Call("GET", "/v1/models", cast=list[models.ModelInfo]))


class Definitions(_Resource):
    """Definitions as code: a bundle of files applied in one transaction, and exported."""

    def apply(self, body: Any = None, /, **fields: Any) -> models.ApplyResult:
        """`files=[{path, content}]`, optional `prune`, `dry_run`, `message`, `author`."""
        return self._t(Call("POST", "/v1/apply", body=_body(body, fields), cast=models.ApplyResult))

    def export(self) -> models.Bundle:
        return self._t(Call("GET", "/v1/export", cast=models.Bundle))


class System(_Resource):
    def health(self) -> bool:
        return self._t(Call("GET", "/healthz", cast=Decoder(TEXT, lambda _: True)))

    def ready(self) -> bool:
        return self._t(Call("GET", "/readyz", cast=Decoder(TEXT, lambda _: True)))

    def metrics(self) -> str:
        return self._t(Call("GET", "/metrics", cast=TEXT))
