"""The `AsyncClient`'s resources: thin async faces over the shared resources of
`_resources.py`, which build each request once for both clients. Here each method is an
`async def` with the same parameters (a test compares the signatures), so a type checker sees
what `await client.runs.get(...)` gives; lists and streams are returned as they are, to be
iterated with `async for`.
"""

from __future__ import annotations

import builtins

from datetime import datetime
from typing import Any, Callable, Mapping

from . import models
from ._paging import AsyncPager
from ._streaming import DEFAULT_RECONNECTS, AsyncRunStream


class AsyncRuns:
    """The async face of `Runs`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def create(self, body: Any = None, /, *, idempotency_key: str | None = None, **fields: Any) -> models.Run:
        return await self._impl.create(body, idempotency_key=idempotency_key, **fields)

    async def get(self, run_id: str) -> models.RunDetail:
        return await self._impl.get(run_id)

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
    ) -> AsyncPager[models.Run]:
        return self._impl.list(
            status=status,
            completion=completion,
            orchestration=orchestration,
            session_id=session_id,
            created_after=created_after,
            created_before=created_before,
            q=q,
            parent_id=parent_id,
            metadata=metadata,
            limit=limit,
        )

    async def delete(self, run_id: str) -> None:
        return await self._impl.delete(run_id)

    async def cancel(self, run_id: str) -> models.Run:
        return await self._impl.cancel(run_id)

    async def input(self, run_id: str, step_id: str, value: Any) -> models.Run:
        return await self._impl.input(run_id, step_id, value)

    async def replan(self, run_id: str, body: Any = None, /, **fields: Any) -> models.Run:
        return await self._impl.replan(run_id, body, **fields)

    async def fork(
        self, run_id: str, body: Any = None, /, *, idempotency_key: str | None = None, **fields: Any
    ) -> models.Run:
        return await self._impl.fork(run_id, body, idempotency_key=idempotency_key, **fields)

    async def pause(self, run_id: str) -> models.Run:
        return await self._impl.pause(run_id)

    async def resume(self, run_id: str) -> models.Run:
        return await self._impl.resume(run_id)

    async def events(self, run_id: str, *, after: int | None = None) -> builtins.list[models.Event]:
        return await self._impl.events(run_id, after=after)

    async def steps(self, run_id: str) -> builtins.list[models.StepView]:
        return await self._impl.steps(run_id)

    async def plans(self, run_id: str) -> builtins.list[models.PlanRecord]:
        return await self._impl.plans(run_id)

    def checkpoints(self, run_id: str, *, limit: int | None = None) -> AsyncPager[models.Checkpoint]:
        return self._impl.checkpoints(run_id, limit=limit)

    async def timeline(self, run_id: str) -> models.Timeline:
        return await self._impl.timeline(run_id)

    async def webhook(self, run_id: str) -> models.WebhookDelivery:
        return await self._impl.webhook(run_id)

    def stream(
        self,
        body: Any = None,
        /,
        *,
        on_input: Callable[[models.InputRequiredData], Any] | None = None,
        idempotency_key: str | None = None,
        max_reconnects: int = DEFAULT_RECONNECTS,
        **fields: Any,
    ) -> AsyncRunStream:
        return self._impl.stream(
            body, on_input=on_input, idempotency_key=idempotency_key, max_reconnects=max_reconnects, **fields
        )

    def join(
        self,
        run_id: str,
        *,
        after: int = 0,
        on_input: Callable[[models.InputRequiredData], Any] | None = None,
        max_reconnects: int = DEFAULT_RECONNECTS,
    ) -> AsyncRunStream:
        return self._impl.join(run_id, after=after, on_input=on_input, max_reconnects=max_reconnects)

    async def run(
        self,
        body: Any = None,
        /,
        *,
        on_input: Callable[[models.InputRequiredData], Any] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> models.RunDetail:
        return await self._impl.run(body, on_input=on_input, idempotency_key=idempotency_key, **fields)


class AsyncVersions:
    """The async face of `Versions`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def list(self, name: str) -> models.VersionList:
        return await self._impl.list(name)

    async def get(self, name: str, version: int | str) -> models.VersionDetail:
        return await self._impl.get(name, version)

    async def delete(self, name: str, version: int) -> None:
        return await self._impl.delete(name, version)


class AsyncLabels:
    """The async face of `Labels`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def set(self, name: str, label: str, version: int) -> models.LabelDetail:
        return await self._impl.set(name, label, version)

    async def delete(self, name: str, label: str) -> None:
        return await self._impl.delete(name, label)


class AsyncRegistry:
    """The async face of a versioned registry (workflows, agents, tools, functions)."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl
        self.versions = AsyncVersions(impl.versions)
        self.labels = AsyncLabels(impl.labels)

    async def list(self) -> builtins.list[Any]:
        return await self._impl.list()

    async def get(self, name: str) -> Any:
        return await self._impl.get(name)

    async def put(
        self, name: str, body: Any = None, /, *, message: str | None = None, author: str | None = None, **fields: Any
    ) -> Any:
        return await self._impl.put(name, body, message=message, author=author, **fields)

    async def delete(self, name: str) -> None:
        return await self._impl.delete(name)

    async def diff(self, name: str, from_: int | str, to: int | str | None = None) -> models.VersionDiff:
        return await self._impl.diff(name, from_, to)


class AsyncSchedules:
    """The async face of `Schedules`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def list(self) -> builtins.list[models.Schedule]:
        return await self._impl.list()

    async def create(self, body: Any = None, /, **fields: Any) -> models.Schedule:
        return await self._impl.create(body, **fields)

    async def get(self, schedule_id: str) -> models.Schedule:
        return await self._impl.get(schedule_id)

    async def update(self, schedule_id: str, body: Any = None, /, **fields: Any) -> models.Schedule:
        return await self._impl.update(schedule_id, body, **fields)

    async def delete(self, schedule_id: str) -> None:
        return await self._impl.delete(schedule_id)

    async def fires(self, schedule_id: str) -> models.ScheduleFires:
        return await self._impl.fires(schedule_id)


class AsyncSessions:
    """The async face of `Sessions`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    def list(self, *, limit: int | None = None) -> AsyncPager[models.SessionListItem]:
        return self._impl.list(limit=limit)

    async def get(self, session_id: str) -> models.Session:
        return await self._impl.get(session_id)

    async def update(self, session_id: str, variables: Mapping[str, Any]) -> models.Session:
        return await self._impl.update(session_id, variables)

    async def delete(self, session_id: str) -> None:
        return await self._impl.delete(session_id)

    async def history(self, session_id: str) -> models.SessionHistory:
        return await self._impl.history(session_id)


class AsyncMemory:
    """The async face of `Memory`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def put(self, namespace: str, key: str, value: Any, *, ttl_seconds: int | None = None) -> models.MemoryItem:
        return await self._impl.put(namespace, key, value, ttl_seconds=ttl_seconds)

    async def get(self, namespace: str, key: str) -> models.MemoryItem:
        return await self._impl.get(namespace, key)

    async def delete(self, namespace: str, key: str) -> None:
        return await self._impl.delete(namespace, key)

    def list(
        self, namespace: str, *, key_prefix: str | None = None, limit: int | None = None
    ) -> AsyncPager[models.MemoryItem]:
        return self._impl.list(namespace, key_prefix=key_prefix, limit=limit)

    async def search(
        self, namespace: str, query: str, *, limit: int | None = None, mode: str | None = None
    ) -> models.SearchResult:
        return await self._impl.search(namespace, query, limit=limit, mode=mode)


class AsyncUsers:
    """The async face of `Users`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def export(self, user_id: str) -> models.UserExport:
        return await self._impl.export(user_id)

    async def erase(self, user_id: str) -> models.UserErased:
        return await self._impl.erase(user_id)


class AsyncUsage:
    """The async face of `Usage`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def get(self) -> models.TenantUsage:
        return await self._impl.get()


class AsyncWorkers:
    """The async face of `Workers`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def list(self) -> builtins.list[models.WorkerView]:
        return await self._impl.list()

    async def poll(
        self,
        *,
        worker_id: str,
        queue: str,
        tools: builtins.list[str] | None = None,
        max_tasks: int = 1,
        wait_ms: int = 30_000,
    ) -> builtins.list[models.TaskView]:
        return await self._impl.poll(worker_id=worker_id, queue=queue, tools=tools, max_tasks=max_tasks, wait_ms=wait_ms)


class AsyncTasks:
    """The async face of `Tasks`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    def list(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        tool: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> AsyncPager[models.TaskView]:
        return self._impl.list(status=status, queue=queue, tool=tool, run_id=run_id, limit=limit)

    async def get(self, task_id: str) -> models.TaskView:
        return await self._impl.get(task_id)

    async def heartbeat(self, task_id: str, *, worker_id: str, progress: Any = None) -> models.Lease:
        return await self._impl.heartbeat(task_id, worker_id=worker_id, progress=progress)

    async def complete(self, task_id: str, *, worker_id: str, output: Any) -> models.TaskView:
        return await self._impl.complete(task_id, worker_id=worker_id, output=output)

    async def fail(
        self, task_id: str, *, worker_id: str, code: str, message: str, retryable: bool = True
    ) -> models.TaskView:
        return await self._impl.fail(task_id, worker_id=worker_id, code=code, message=message, retryable=retryable)


class AsyncModels:
    """The async face of `Models`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def list(self) -> builtins.list[models.ModelInfo]:
        return await self._impl.list()


class AsyncDefinitions:
    """The async face of `Definitions`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def apply(self, body: Any = None, /, **fields: Any) -> models.ApplyResult:
        return await self._impl.apply(body, **fields)

    async def export(self) -> models.Bundle:
        return await self._impl.export()


class AsyncSystem:
    """The async face of `System`: the same methods, awaited."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    async def health(self) -> bool:
        return await self._impl.health()

    async def ready(self) -> bool:
        return await self._impl.ready()

    async def metrics(self) -> str:
        return await self._impl.metrics()
