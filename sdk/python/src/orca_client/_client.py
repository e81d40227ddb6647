"""`Client` and `AsyncClient`: configuration, and the resources as attributes."""

from __future__ import annotations

import os
from typing import Any, Mapping

import httpx

from ._resources import (
    Agents,
    Definitions,
    Functions,
    Models,
    Runs,
    Schedules,
    Memory,
    Sessions,
    System,
    Tools,
    Usage,
    Users,
    Workers,
    Tasks,
    Workflows,
)
from ._async_resources import (
    AsyncDefinitions,
    AsyncModels,
    AsyncRegistry,
    AsyncRuns,
    AsyncSchedules,
    AsyncMemory,
    AsyncSessions,
    AsyncSystem,
    AsyncUsage,
    AsyncUsers,
    AsyncWorkers,
    AsyncTasks,
)
from ._transport import AsyncTransport, SyncTransport

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2


def resolve_base_url(base_url: str | None) -> str:
    """The argument, else `ORCA_URL`, else the server's default address."""
    return base_url or os.environ.get("ORCA_URL") or DEFAULT_BASE_URL


def resolve_api_key(api_key: str | None) -> str | None:
    """The argument, else `ORCA_API_KEY` (sent as `Authorization: Bearer ...`), else none."""
    return api_key or os.environ.get("ORCA_API_KEY") or None


class _Surface:
    """What both clients expose: one attribute per resource."""

    def _attach(self, transport: Any) -> None:
        self._transport = transport
        self.runs = Runs(transport)
        self.workflows = Workflows(transport)
        self.agents = Agents(transport)
        self.tools = Tools(transport)
        self.functions = Functions(transport)
        self.schedules = Schedules(transport)
        self.sessions = Sessions(transport)
        self.memory = Memory(transport)
        self.users = Users(transport)
        self.usage = Usage(transport)
        self.workers = Workers(transport)
        self.tasks = Tasks(transport)
        self.models = Models(transport)
        self.definitions = Definitions(transport)
        self._system = System(transport)

    @property
    def base_url(self) -> str:
        return self._transport.base_url

    def health(self) -> Any:
        """True while the server is alive (`GET /healthz`)."""
        return self._system.health()

    def ready(self) -> Any:
        """True when the server's store answers (`GET /readyz`); raises `ServerError` (503) otherwise."""
        return self._system.ready()

    def metrics(self) -> Any:
        """The Prometheus/OpenMetrics text of `GET /metrics`."""
        return self._system.metrics()


class Client(_Surface):
    """A synchronous orca client.

    >>> client = Client()  # ORCA_URL / ORCA_API_KEY, else http://127.0.0.1:8080
    >>> run = client.runs.run(input="10 + 20")
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._attach(
            SyncTransport(
                base_url=resolve_base_url(base_url),
                api_key=resolve_api_key(api_key),
                timeout=timeout,
                max_retries=max_retries,
                headers=headers,
                http_client=http_client,
            )
        )

    def close(self) -> None:
        """Close the connection pool (not one the caller passed as `http_client`)."""
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncClient:
    """The asyncio twin of `Client`: the same methods, awaited (`async for` over lists/streams)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._attach(
            AsyncTransport(
                base_url=resolve_base_url(base_url),
                api_key=resolve_api_key(api_key),
                timeout=timeout,
                max_retries=max_retries,
                headers=headers,
                http_client=http_client,
            )
        )

    def _attach(self, transport: AsyncTransport) -> None:
        # The shared resources build the requests; the async faces give them `async def` types.
        shared = _Surface()
        shared._attach(transport)
        self._transport = transport
        self.runs = AsyncRuns(shared.runs)
        self.workflows = AsyncRegistry(shared.workflows)
        self.agents = AsyncRegistry(shared.agents)
        self.tools = AsyncRegistry(shared.tools)
        self.functions = AsyncRegistry(shared.functions)
        self.schedules = AsyncSchedules(shared.schedules)
        self.sessions = AsyncSessions(shared.sessions)
        self.memory = AsyncMemory(shared.memory)
        self.users = AsyncUsers(shared.users)
        self.usage = AsyncUsage(shared.usage)
        self.workers = AsyncWorkers(shared.workers)
        self.tasks = AsyncTasks(shared.tasks)
        self.models = AsyncModels(shared.models)
        self.definitions = AsyncDefinitions(shared.definitions)
        self._system = AsyncSystem(shared._system)

    @property
    def base_url(self) -> str:
        return self._transport.base_url

    async def health(self) -> bool:
        """True while the server is alive (`GET /healthz`)."""
        return await self._system.health()

    async def ready(self) -> bool:
        """True when the server's store answers (`GET /readyz`); raises `ServerError` (503) otherwise."""
        return await self._system.ready()

    async def metrics(self) -> str:
        """The Prometheus/OpenMetrics text of `GET /metrics`."""
        return await self._system.metrics()

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
