"""Workers: your own functions serving orca's worker tools (a tool declared with a `queue`).

Register functions as tools of one queue, then run the worker: it long-polls for tasks (never
more than `concurrency` in flight), calls each function with the task's arguments, heartbeats
automatically, completes the task with the return value or fails it with the exception's
message, and on `stop()` (or SIGTERM/SIGINT) stops polling, gives the tasks in flight `grace`
seconds, and hands the rest back (failed retryable, code `worker_shutdown`) so another worker
takes them.

```python
from orca_client.worker import TaskContext, Worker

worker = Worker(queue="demo")

@worker.tool(name="demo.slugify")
def slugify(text: str, ctx: TaskContext) -> dict:
    \"\"\"Turns a text into a URL slug.\"\"\"
    return {"slug": "-".join(text.lower().split())}

worker.run(declare=True)   # PUTs the declarations, then serves until SIGTERM/SIGINT
```

The input schema comes from the type hints (or `input_schema=`); the description from the
docstring. A function may be `async def` (run on the worker's event loop, cancelled with
`asyncio.CancelledError` when the run is cancelled) or plain `def` (run in a thread; it sees
the cancel as `ctx.cancelled` and `ctx.wait()`). A parameter annotated `TaskContext` gets the
task's context: its `idempotency_key` (the same on every re-offer of the call: key your side
effects on it), `attempt`, `heartbeat(progress)` (streamed to the run's clients).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import enum
import inspect
import json
import logging
import os
import random
import re
import signal
import threading
import types
import typing
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, Union

from . import models
from ._client import AsyncClient
from ._errors import APIConnectionError, ConflictError, NotFoundError, OrcaError

__all__ = [
    "NonRetryableError",
    "Retry",
    "TaskCancelled",
    "TaskContext",
    "TaskFailure",
    "Worker",
    "schema_from_hints",
]

log = logging.getLogger("orca_client.worker")

# How long past the grace a stopping worker keeps retrying a report orca does not answer.
_REPORT_AFTER_GRACE = 5.0

_F = typing.TypeVar("_F", bound=Callable[..., Any])

_TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


class TaskFailure(Exception):
    """Raise it from a tool to fail the task with your own `code` and say whether orca should
    offer it again (while attempts remain). Any other exception fails it retryable, code
    `worker_error`, with the exception's message (never its traceback)."""

    def __init__(self, code: str, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class NonRetryableError(TaskFailure):
    """Fails the task for good (code `worker_error` unless given)."""

    def __init__(self, message: str, *, code: str = "worker_error") -> None:
        super().__init__(code, message, retryable=False)


class TaskCancelled(Exception):
    """`ctx.raise_if_cancelled()` raises it once the task is no longer worth finishing: the run
    was cancelled, the claim was lost, or the worker handed it back at shutdown."""


@dataclasses.dataclass(frozen=True)
class Retry:
    """How often orca offers a task, and the pause before the next offer (doubled each time up
    to `max_backoff_ms`). `None` keeps the server's default."""

    max_attempts: int | None = None
    backoff_ms: int | None = None
    max_backoff_ms: int | None = None


class TaskContext:
    """What a tool's function gets besides its arguments (a parameter annotated
    `TaskContext`)."""

    def __init__(self, task: models.TaskView, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self.task = task
        self._worker = worker
        self._loop = loop
        self._cancelled = threading.Event()
        self.cancel_reason: str | None = None

    @property
    def task_id(self) -> str:
        return self.task.id

    @property
    def idempotency_key(self) -> str:
        """The same on every offer of this call: key your side effects on it."""
        return self.task.idempotency_key

    @property
    def attempt(self) -> int:
        """1-based: 2 means the task is offered for the second time."""
        return self.task.attempt

    @property
    def run_id(self) -> str:
        return self.task.run_id

    @property
    def tool(self) -> str:
        return self.task.tool

    @property
    def cancelled(self) -> bool:
        """True once the run was cancelled, the claim lost, or the task handed back."""
        return self._cancelled.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleeps up to `seconds` (in a plain `def` tool); True as soon as the task is cancelled."""
        return self._cancelled.wait(seconds)

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            raise TaskCancelled(self.cancel_reason or "cancelled")

    def heartbeat(self, progress: Any = None) -> None:
        """Heartbeats now, with `progress` (any JSON) streamed to the run's clients. From a
        plain `def` tool it waits for the answer; from the event loop (an `async def` tool)
        it sends in the background: there, prefer `await ctx.aheartbeat(...)`. Never raises
        for a refusal: a cancelled or lost task sets `cancelled` instead."""
        beat = self._worker._heartbeat(self, progress)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._worker._background(beat)
            return
        asyncio.run_coroutine_threadsafe(beat, self._loop).result()

    async def aheartbeat(self, progress: Any = None) -> None:
        """`heartbeat`, awaited (for `async def` tools)."""
        await self._worker._heartbeat(self, progress)

    def _cancel(self, reason: str) -> None:
        if not self._cancelled.is_set():
            self.cancel_reason = reason
            self._cancelled.set()


@dataclasses.dataclass
class _Tool:
    name: str
    fn: Callable[..., Any]
    declaration: dict[str, Any]
    context_param: str | None
    is_async: bool


@dataclasses.dataclass
class _Running:
    ctx: TaskContext
    # Set once the outcome must not be reported (cancelled, lost, handed back).
    settled: bool = False
    job: asyncio.Task[None] | None = None
    beats: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


class Worker:
    """Serves the tools registered on it from one queue.

    `client` is an `AsyncClient` (the worker runs on asyncio); without one, the worker makes
    its own from `base_url`/`api_key` (or `ORCA_URL`/`ORCA_API_KEY`) for each `run`.
    """

    def __init__(
        self,
        queue: str,
        *,
        client: AsyncClient | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        worker_id: str | None = None,
        concurrency: int = 4,
        wait_ms: int = 30_000,
        grace: float = 30.0,
        idle_heartbeat: float = 10.0,
        max_backoff: float = 5.0,
    ) -> None:
        self.queue = queue
        self.worker_id = worker_id or f"worker-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.concurrency = max(1, int(concurrency))
        self.wait_ms = min(30_000, max(0, int(wait_ms)))
        self.grace = grace
        self.idle_heartbeat = idle_heartbeat
        self.max_backoff = max_backoff
        self._client = client
        self._base_url = base_url
        self._api_key = api_key
        self._tools: dict[str, _Tool] = {}
        self._running: dict[str, _Running] = {}
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._poll: asyncio.Task[Any] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._chores: set[asyncio.Task[Any]] = set()
        self._active: AsyncClient | None = None
        # Once stopping: past this loop time, reports orca does not answer are given up.
        self._give_up_at = float("inf")

    # ----- registering -----

    @typing.overload
    def tool(self, fn: _F) -> _F: ...

    @typing.overload
    def tool(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        schedule_to_start_ms: int | None = None,
        start_to_close_ms: int | None = None,
        heartbeat_ms: int | None = None,
        retry: Retry | None = None,
    ) -> Callable[[_F], _F]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        schedule_to_start_ms: int | None = None,
        start_to_close_ms: int | None = None,
        heartbeat_ms: int | None = None,
        retry: Retry | None = None,
    ) -> Any:
        """Registers a function as a tool of this worker's queue: `@worker.tool` or
        `@worker.tool(name="billing.charge", heartbeat_ms=5000)`. The name defaults to
        `<queue>.<function name>`, the schema to one built from the type hints."""

        def register(f: _F) -> _F:
            tool_name = name or _default_name(self.queue, f.__name__)
            if not _TOOL_NAME.match(tool_name):
                raise ValueError(f"tool name {tool_name!r} must be dotted lowercase, e.g. `billing.charge`")
            if tool_name in self._tools:
                raise ValueError(f"tool {tool_name} is already registered")
            declaration: dict[str, Any] = {
                "name": tool_name,
                "queue": self.queue,
                "input_schema": input_schema if input_schema is not None else schema_from_hints(f),
            }
            doc = description if description is not None else inspect.getdoc(f)
            if doc:
                declaration["description"] = doc
            optional = {
                "schedule_to_start_ms": schedule_to_start_ms,
                "start_to_close_ms": start_to_close_ms,
                "heartbeat_ms": heartbeat_ms,
            }
            declaration.update({k: v for k, v in optional.items() if v is not None})
            if retry is not None:
                declaration["retry"] = {k: v for k, v in dataclasses.asdict(retry).items() if v is not None}
            self._tools[tool_name] = _Tool(
                name=tool_name,
                fn=f,
                declaration=declaration,
                context_param=_context_param(f),
                is_async=inspect.iscoroutinefunction(f),
            )
            return f

        return register(fn) if fn is not None else register

    @property
    def tool_names(self) -> builtins.list[str]:
        return builtins.list(self._tools)

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def declaration(self, name: str) -> dict[str, Any]:
        """What `declare` PUTs for the tool `name` (the server's WorkerTool shape)."""
        return dict(self._tools[name].declaration)

    # ----- running -----

    def declare(self) -> None:
        """PUTs every registered tool as a worker tool of this queue (`PUT /v1/tools/{name}`)."""
        asyncio.run(self._with_client(self._declare))

    async def adeclare(self) -> None:
        await self._with_client(self._declare)

    def run(self, *, declare: bool = False) -> None:
        """Serves until `stop()` or SIGTERM/SIGINT, then shuts down gracefully (blocking)."""
        asyncio.run(self.arun(declare=declare, handle_signals=True))

    async def arun(self, *, declare: bool = False, handle_signals: bool = False) -> None:
        """`run`, awaited. Raises when the server refuses the poll itself (a bad key or
        queue: a 4xx other than 408/429)."""
        if not self._tools:
            raise OrcaError("register a tool before running the worker")
        if self._loop is not None:
            raise OrcaError("this worker is already running")
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stopping = False
        self._give_up_at = float("inf")
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="orca-worker")
        installed = self._install_signals() if handle_signals else []
        try:
            await self._with_client(lambda client: self._serve(client, declare))
        finally:
            for sig in installed:
                self._loop.remove_signal_handler(sig)
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._loop = None

    def stop(self) -> None:
        """Stops polling; tasks in flight get `grace` seconds, then are handed back. Safe from
        any thread or a signal handler; `run`/`arun` return once the worker is done."""
        loop = self._loop
        if loop is None:
            self._stopping = True
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._begin_stop()
        else:
            loop.call_soon_threadsafe(self._begin_stop)

    def _begin_stop(self) -> None:
        if self._stopping:
            return
        self._mark_stopping()
        log.info("worker %s stopping (grace %ss)", self.worker_id, self.grace)
        if self._poll is not None:
            self._poll.cancel()
        assert self._wake is not None
        self._wake.set()

    def _install_signals(self) -> builtins.list[signal.Signals]:
        assert self._loop is not None
        installed: builtins.list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._loop.add_signal_handler(sig, self._begin_stop)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread, or not a Unix loop
        return installed

    async def _with_client(self, body: Callable[[AsyncClient], Awaitable[Any]]) -> Any:
        if self._client is not None:
            return await body(self._client)
        async with AsyncClient(self._base_url, self._api_key) as client:
            return await body(client)

    async def _declare(self, client: AsyncClient) -> None:
        for name, tool in self._tools.items():
            await client.tools.put(name, tool.declaration)

    async def _serve(self, client: AsyncClient, declare: bool) -> None:
        self._active = client
        if declare:
            await self._declare(client)
        try:
            await self._poll_loop(client)
        finally:
            await self._shutdown()

    async def _poll_loop(self, client: AsyncClient) -> None:
        assert self._wake is not None
        failures = 0
        while not self._stopping:
            if len(self._running) >= self.concurrency:
                self._wake.clear()
                await self._wake.wait()
                continue
            want = min(32, self.concurrency - len(self._running))
            self._poll = asyncio.ensure_future(
                client.workers.poll(
                    worker_id=self.worker_id,
                    queue=self.queue,
                    tools=self.tool_names,
                    max_tasks=want,
                    wait_ms=self.wait_ms,
                )
            )
            try:
                tasks = await self._poll
                failures = 0
            except asyncio.CancelledError:
                if self._stopping:
                    return
                raise
            except OrcaError as error:
                if self._stopping:
                    return
                if not _transient(error):
                    log.error("poll refused: %s", error)
                    raise
                pause = self._backoff(failures)
                failures += 1
                log.warning("poll failed (%s); again in %.2fs", error, pause)
                await self._sleep_unless_stopping(pause)
                continue
            finally:
                self._poll = None
            for task in tasks:
                self._start(client, task)

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        assert self._wake is not None
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _start(self, client: AsyncClient, task: models.TaskView) -> None:
        assert self._loop is not None
        entry = _Running(ctx=TaskContext(task, self, self._loop))
        self._running[task.id] = entry
        entry.job = asyncio.ensure_future(self._execute(client, entry))

        def finished(_: Any) -> None:
            self._running.pop(task.id, None)
            assert self._wake is not None
            self._wake.set()

        entry.job.add_done_callback(finished)

    async def _execute(self, client: AsyncClient, entry: _Running) -> None:
        task = entry.ctx.task
        if self._stopping:
            # Claimed by a poll answered while stopping: hand it back at once.
            entry.settled = True
            await self._report_failure(client, task, "worker_shutdown", "the worker is shutting down", True)
            return
        tool = self._tools.get(task.tool)
        if tool is None:
            entry.settled = True
            await self._report_failure(client, task, "tool_not_found", f"this worker has no tool {task.tool}", False)
            return
        beats = asyncio.ensure_future(self._auto_heartbeat(entry))
        try:
            output = await self._call(tool, entry)
            failure = None
        except asyncio.CancelledError:
            if not entry.settled:
                raise
            output, failure = None, None
        except TaskFailure as error:
            output, failure = None, (error.code, error.message, error.retryable)
        except TaskCancelled:
            output, failure = None, None
        except Exception as error:  # the tool's own failure: reported, never raised
            output, failure = None, ("worker_error", _message(error), True)
        finally:
            beats.cancel()
        if entry.settled:
            if entry.ctx.cancel_reason == "task_cancelled":
                log.info("task %s (%s) was cancelled", task.id, task.tool)
            return
        entry.settled = True
        if failure is not None:
            await self._report_failure(client, task, *failure)
            return
        try:
            json_output = _jsonable(output)
        except (TypeError, ValueError) as error:
            await self._report_failure(client, task, "worker_error", f"the output is not JSON: {error}", False)
            return
        await self._report(client, task, "complete", lambda: client.tasks.complete(
            task.id, worker_id=self.worker_id, output=json_output))

    async def _call(self, tool: _Tool, entry: _Running) -> Any:
        args = dict(entry.ctx.task.arguments or {})
        if tool.context_param is not None:
            args[tool.context_param] = entry.ctx
        if tool.is_async:
            return await tool.fn(**args)
        assert self._loop is not None
        return await self._loop.run_in_executor(self._pool, lambda: tool.fn(**args))

    async def _auto_heartbeat(self, entry: _Running) -> None:
        """Heartbeats every heartbeat_ms/3 (or `idle_heartbeat` seconds, to hear of a cancel)."""
        task = entry.ctx.task
        every = max(0.05, task.heartbeat_ms / 3000) if task.heartbeat_ms else self.idle_heartbeat
        while not entry.settled:
            await asyncio.sleep(every)
            await self._heartbeat(entry.ctx, None)

    async def _heartbeat(self, ctx: TaskContext, progress: Any) -> None:
        entry = self._running.get(ctx.task_id)
        client = self._active
        if entry is None or entry.settled or client is None:
            return
        async with entry.beats:  # one heartbeat at a time per task, in order
            if entry.settled:
                return
            try:
                await client.tasks.heartbeat(ctx.task_id, worker_id=self.worker_id, progress=progress)
            except OrcaError as error:
                if _transient(error):
                    log.warning("heartbeat of task %s failed: %s", ctx.task_id, error)
                    return
                if entry.settled:
                    return
                entry.settled = True
                reason = _reason(error) or str(error)
                if reason != "task_cancelled":
                    log.warning("task %s is no longer this worker's: %s", ctx.task_id, reason)
                ctx._cancel(reason)
                if entry.job is not None and self._tools[ctx.tool].is_async:
                    entry.job.cancel()

    async def _report_failure(
        self, client: AsyncClient, task: models.TaskView, code: str, message: str, retryable: bool
    ) -> None:
        await self._report(client, task, "fail", lambda: client.tasks.fail(
            task.id, worker_id=self.worker_id, code=code, message=message, retryable=retryable))

    async def _report(
        self, client: AsyncClient, task: models.TaskView, kind: str, send: Callable[[], Awaitable[Any]]
    ) -> None:
        """Completes or fails a task, retrying connection errors and 429/5xx (an orca restart)
        until an answer; a 409 (the task is no longer this worker's) is logged and dropped."""
        attempt = 0
        while True:
            try:
                await send()
                return
            except ConflictError as error:
                log.warning("%s of task %s refused (%s); dropped", kind, task.id, _reason(error))
                return
            except OrcaError as error:
                if not _transient(error):
                    if kind == "complete" and error.status in (400, 413, 422):
                        # The same output would be refused on every attempt: fail the task now
                        # rather than leave it claimed to lapse and run again.
                        code = "output_too_large" if error.status == 413 else "output_rejected"
                        log.error("completion of task %s refused (%s); failing it with %s", task.id, error, code)
                        message = f"the server refused the output: {error}"[:4000]
                        await self._report_failure(client, task, code, message, False)
                        return
                    log.error("%s of task %s refused: %s; dropped", kind, task.id, error)
                    return
                pause = self._backoff(attempt)
                attempt += 1
                if self._stopping and self._loop is not None and self._loop.time() + pause > self._give_up_at:
                    log.error("%s of task %s failed (%s); given up: the worker is stopping", kind, task.id, error)
                    return
                log.warning("%s of task %s failed (%s); again in %.2fs", kind, task.id, error, pause)
                await asyncio.sleep(pause)

    def _mark_stopping(self) -> None:
        """Stops taking tasks; reports still unanswered 5 s past the grace are given up (orca
        unreachable must not keep a stopping worker alive)."""
        if not self._stopping:
            self._stopping = True
            assert self._loop is not None
            self._give_up_at = self._loop.time() + self.grace + _REPORT_AFTER_GRACE

    async def _shutdown(self) -> None:
        """After the poll loop: tasks in flight get `grace` seconds, then the rest are handed back."""
        self._mark_stopping()
        jobs = [r.job for r in self._running.values() if r.job is not None]
        if jobs:
            _, late = await asyncio.wait(jobs, timeout=self.grace)
            if late:
                client = self._active
                assert client is not None
                handing = []
                for entry in builtins.list(self._running.values()):
                    if entry.settled:
                        continue
                    entry.settled = True
                    entry.ctx._cancel("worker_shutdown")
                    if entry.job is not None and self._tools[entry.ctx.tool].is_async:
                        entry.job.cancel()
                    log.warning("handing back task %s (%s)", entry.ctx.task_id, entry.ctx.tool)
                    handing.append(self._report_failure(
                        client, entry.ctx.task, "worker_shutdown",
                        "the worker shut down before the task finished", True))
                await asyncio.gather(*handing)
                # Reports already under way (a completion being retried) get a moment too.
                await asyncio.wait(jobs, timeout=1.0)
        if self._chores:
            await asyncio.wait(self._chores, timeout=1.0)
        self._active = None

    def _background(self, coro: Awaitable[Any]) -> None:
        chore = asyncio.ensure_future(coro)
        self._chores.add(chore)
        chore.add_done_callback(self._chores.discard)

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.max_backoff, 0.25 * 2 ** min(attempt, 10))
        return ceiling * (0.5 + random.random() / 2)


# ----- schemas from type hints -----


def schema_from_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON Schema of `fn`'s arguments, from its type hints: `str`, `int`, `float`,
    `bool`, `None`, `list[T]`, `dict[str, T]`, `Literal[...]`, `Optional[T]`/`T | None`,
    unions, enums, TypedDicts, dataclasses, pydantic models, and `Annotated[T, "description"]`.
    Parameters with a default are optional; the `TaskContext` parameter is left out."""
    hints = typing.get_type_hints(fn, include_extras=True)
    properties: dict[str, Any] = {}
    required: builtins.list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(name, Any)
        if _is_context(hint):
            continue
        where = f"{getattr(fn, '__qualname__', fn)}({name})"
        prop = _type_schema(hint, where)
        if param.default is param.empty:
            required.append(name)
        else:
            try:
                prop = {**prop, "default": _jsonable(param.default)}
            except (TypeError, ValueError):
                pass
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def _type_schema(hint: Any, where: str) -> dict[str, Any]:
    if hint is Any or hint is object:
        return {}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        inner = _type_schema(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**inner, "description": " ".join(notes)} if notes else inner
    if origin is Literal:
        return {"enum": [_jsonable(a) for a in args]}
    if origin is Union or origin is types.UnionType:
        options = [_type_schema(a, where) for a in args]
        return {"anyOf": options}
    if origin in (list, builtins.list, tuple, set, frozenset) or hint in (list, tuple, set):
        items = args[0] if args else Any
        schema: dict[str, Any] = {"type": "array"}
        if items is not Ellipsis and items is not Any:
            schema["items"] = _type_schema(items, where)
        return schema
    if origin is dict or hint is dict:
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = _type_schema(args[1], where)
        return schema
    if isinstance(hint, type):
        if issubclass(hint, enum.Enum):
            return {"enum": [_jsonable(m.value) for m in hint]}
        if typing.is_typeddict(hint):
            fields = typing.get_type_hints(hint, include_extras=True)
            keys = getattr(hint, "__required_keys__", frozenset(fields))
            out: dict[str, Any] = {
                "type": "object",
                "properties": {k: _type_schema(v, f"{where}.{k}") for k, v in fields.items()},
                "additionalProperties": False,
            }
            if keys:
                out["required"] = sorted(keys)
            return out
        if dataclasses.is_dataclass(hint):
            fields = typing.get_type_hints(hint, include_extras=True)
            props = {f.name: _type_schema(fields.get(f.name, Any), f"{where}.{f.name}") for f in dataclasses.fields(hint)}
            need = [
                f.name
                for f in dataclasses.fields(hint)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ]
            out = {"type": "object", "properties": props, "additionalProperties": False}
            if need:
                out["required"] = need
            return out
        model_schema = getattr(hint, "model_json_schema", None)
        if callable(model_schema):
            return typing.cast(dict[str, Any], model_schema())
    raise TypeError(f"{where}: no JSON Schema for the type hint {hint!r}; pass input_schema= to the tool")


def _is_context(hint: Any) -> bool:
    return hint is TaskContext or (isinstance(hint, str) and hint == "TaskContext")


def _context_param(fn: Callable[..., Any]) -> str | None:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    for name in inspect.signature(fn).parameters:
        if _is_context(hints.get(name)):
            return name
    return None


def _default_name(queue: str, function: str) -> str:
    prefix = re.sub(r"[^a-z0-9_]", "_", queue.lower()).lstrip("_0123456789") or "tools"
    return f"{prefix}.{function.lower()}"


def _jsonable(value: Any) -> Any:
    """`value` as plain JSON (pydantic models and dataclasses dumped); raises when it is not."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    elif isinstance(value, enum.Enum):
        value = value.value
    return json.loads(json.dumps(value, allow_nan=False))


def _message(error: BaseException) -> str:
    return (str(error) or type(error).__name__)[:4000]


def _transient(error: OrcaError) -> bool:
    """Worth retrying: no answer, or 408/429/5xx."""
    if isinstance(error, APIConnectionError):
        return True
    status = error.status or 0
    return status in (408, 429) or status >= 500


def _reason(error: OrcaError) -> str | None:
    """The `reason` of a 409 refusal; `not_found` for a 404."""
    if isinstance(error, NotFoundError):
        return "not_found"
    problem = error.problem or {}
    reason = problem.get("reason") if isinstance(problem, dict) else None
    return reason if isinstance(reason, str) else None
