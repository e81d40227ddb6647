"""Following a run's event stream across dropped connections and server restarts.

The stream resumes with `Last-Event-ID` set to the last `seq` it yielded, and checks that
every event is the one after the last: a repeat is dropped, a gap is an error. A 204 on
resume means the run has finished with nothing after that seq. Leaving the iteration closes
the connection and nothing else: the run goes on unless `cancel()` is called.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from contextlib import aclosing
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping

import httpx

from . import models
from ._errors import APIConnectionError, ConflictError, OrcaError, StreamError, error_from_response
from ._retry import is_retryable, retry_delay
from ._sse import FrameParser, frame_event
from ._transport import AsyncTransport, Call, SyncTransport, transport_error

#: An `input_required` answerer: gets the event's `data`, returns the value to send.
InputCallback = Callable[[models.InputRequiredData], Any]

#: Consecutive failed reconnects before the stream gives up (with backoff: about 40 s).
DEFAULT_RECONNECTS = 8

_SSE_HEADERS = {"Accept": "text/event-stream"}


def _field(data: Any, name: str) -> Any:
    return data.get(name) if isinstance(data, Mapping) else getattr(data, name, None)


class _Cursor:
    """Where a stream stands: the run, the last seq yielded, whether `final` came."""

    def __init__(self, run_id: str | None, after: int) -> None:
        self.run_id = run_id
        self.last = after
        self.final: Any = None
        self.failures = 0

    def open_call(self, create_body: Any, idempotency_key: str) -> Call:
        """The POST that creates the run while its id is unknown, else a resume from `last`."""
        if self.run_id is None:
            headers = {**_SSE_HEADERS, "Idempotency-Key": idempotency_key}
            return Call("POST", "/v1/runs", body=create_body, headers=headers)
        headers = {**_SSE_HEADERS, "Last-Event-ID": str(self.last)}
        return Call("GET", f"/v1/runs/{self.run_id}/events", headers=headers)

    def accept(self, event: Any) -> bool:
        """True for the next event in order; False for one already yielded; raises on a gap."""
        if self.run_id is None:
            self.run_id = str(event.run_id)
        if event.seq <= self.last:
            return False
        if event.seq != self.last + 1:
            raise StreamError(f"run {self.run_id}: event {event.seq} follows {self.last}: events are missing")
        self.last = event.seq
        self.failures = 0
        if event.kind == "final":
            self.final = event
        return True

    def adopt_location(self, response: httpx.Response) -> None:
        """A streamed create names its run in `Location`: once known, a connection lost before
        the first event resumes with `GET .../events` instead of posting again."""
        location = response.headers.get("location", "")
        if self.run_id is None and location.startswith("/v1/runs/"):
            self.run_id = location.rsplit("/", 1)[-1]

    def adopt_run(self, response: httpx.Response) -> None:
        """A JSON answer to the create (the run this Idempotency-Key already made): follow it."""
        self.run_id = str(response.json()["id"])

    def next_delay(self, error: OrcaError, limit: int) -> float:
        """Seconds before reconnecting after `error`, or raises it when it is not worth it."""
        if not is_retryable(error) or self.failures >= limit:
            raise error
        delay = retry_delay(self.failures, error)
        self.failures += 1
        if delay is None:
            raise error
        return delay


def _is_json(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")


class RunStream:
    """Typed events of one run, in order, each once; `final_run()` gives the run at its end.

    Use as an iterator (`for event in stream`) and close it when leaving early (or use it as a
    context manager); closing does not cancel the run.
    """

    def __init__(
        self,
        transport: SyncTransport,
        *,
        run_id: str | None = None,
        create_body: Any = None,
        idempotency_key: str = "",
        after: int = 0,
        on_input: InputCallback | None = None,
        max_reconnects: int = DEFAULT_RECONNECTS,
    ) -> None:
        self._transport = transport
        self._cursor = _Cursor(run_id, after)
        self._create_body = create_body
        self._key = idempotency_key
        self._on_input = on_input
        self._max_reconnects = max_reconnects
        self._events = self._follow()

    @property
    def run_id(self) -> str | None:
        """The run's id: known once the first event (or the create's answer) arrived."""
        return self._cursor.run_id

    @property
    def final_event(self) -> models.FinalEvent | None:
        """The `final` event, once it has been yielded."""
        return self._cursor.final

    def __iter__(self) -> Iterator[models.Event]:
        return self

    def __next__(self) -> models.Event:
        return next(self._events)

    def __enter__(self) -> RunStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop following: closes the connection; the run itself goes on."""
        self._events.close()

    def cancel(self) -> models.Run:
        """Cancel the run (when asked: leaving the stream does not), and stop following it."""
        self.close()
        if self.run_id is None:
            raise StreamError("no event has arrived yet: the run's id is unknown")
        return self._transport(Call("POST", f"/v1/runs/{self.run_id}/cancel", cast=models.Run))

    def final_run(self) -> models.RunDetail:
        """Reads the rest of the stream (answering input if a callback was given) and returns the run."""
        for _ in self._events:
            pass
        return self._transport(Call("GET", f"/v1/runs/{self.run_id}", cast=models.RunDetail))

    def _follow(self) -> Generator[Any, None, None]:
        cursor = self._cursor
        while cursor.final is None:
            try:
                finished = yield from self._read_once()
                if finished:
                    return
                error: OrcaError = APIConnectionError("the event stream ended before `final`")
            except httpx.TransportError as exc:
                error = transport_error(exc)
            except OrcaError as exc:
                error = exc
            time.sleep(cursor.next_delay(error, self._max_reconnects))

    def _read_once(self) -> Generator[Any, None, bool]:
        """One connection: yields its new events; True when the run is over."""
        cursor = self._cursor
        args = self._transport.request_args(cursor.open_call(self._create_body, self._key))
        with self._transport.http.stream(**args) as response:
            if response.status_code == 204:
                return True
            if not response.is_success:
                response.read()
                raise error_from_response(response)
            if _is_json(response):
                response.read()
                cursor.adopt_run(response)
                return False
            cursor.adopt_location(response)
            parser = FrameParser()
            for line in response.iter_lines():
                frame = parser.feed(line)
                if frame is None:
                    continue
                event = frame_event(frame)
                if not cursor.accept(event):
                    continue
                yield event
                if event.kind == "input_required" and self._on_input is not None:
                    self._answer(event)
                if cursor.final is not None:
                    return True
        return False

    def _answer(self, event: Any) -> None:
        value = self._on_input(event.data)  # type: ignore[misc]
        body = {"step_id": _field(event.data, "step_id"), "value": value}
        try:
            self._transport(Call("POST", f"/v1/runs/{self.run_id}/input", body=body, cast=models.Run))
        except ConflictError:
            # The run no longer waits on this step (answered elsewhere, or it restarted and
            # will ask again with a new input_required event, which the callback then answers).
            pass


class AsyncRunStream:
    """The async twin of `RunStream`: `async for event in stream`, `await stream.final_run()`."""

    def __init__(
        self,
        transport: AsyncTransport,
        *,
        run_id: str | None = None,
        create_body: Any = None,
        idempotency_key: str = "",
        after: int = 0,
        on_input: Callable[[models.InputRequiredData], Any | Awaitable[Any]] | None = None,
        max_reconnects: int = DEFAULT_RECONNECTS,
    ) -> None:
        self._transport = transport
        self._cursor = _Cursor(run_id, after)
        self._create_body = create_body
        self._key = idempotency_key
        self._on_input = on_input
        self._max_reconnects = max_reconnects
        self._events = self._follow()

    @property
    def run_id(self) -> str | None:
        return self._cursor.run_id

    @property
    def final_event(self) -> models.FinalEvent | None:
        return self._cursor.final

    def __aiter__(self) -> AsyncIterator[models.Event]:
        return self

    async def __anext__(self) -> models.Event:
        return await self._events.__anext__()

    async def __aenter__(self) -> AsyncRunStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop following: closes the connection; the run itself goes on."""
        await self._events.aclose()

    async def cancel(self) -> models.Run:
        """Cancel the run (when asked: leaving the stream does not), and stop following it."""
        await self.aclose()
        if self.run_id is None:
            raise StreamError("no event has arrived yet: the run's id is unknown")
        return await self._transport(Call("POST", f"/v1/runs/{self.run_id}/cancel", cast=models.Run))

    async def final_run(self) -> models.RunDetail:
        async for _ in self._events:
            pass
        return await self._transport(Call("GET", f"/v1/runs/{self.run_id}", cast=models.RunDetail))

    async def _follow(self) -> AsyncGenerator[Any, None]:
        cursor = self._cursor
        while cursor.final is None:
            error: OrcaError | None = None
            try:
                async with aclosing(self._read_once()) as events:
                    async for item in events:
                        if item is _DONE:
                            return
                        yield item
                if cursor.final is not None:
                    return
                error = APIConnectionError("the event stream ended before `final`")
            except httpx.TransportError as exc:
                error = transport_error(exc)
            except OrcaError as exc:
                error = exc
            await asyncio.sleep(cursor.next_delay(error, self._max_reconnects))

    async def _read_once(self) -> AsyncGenerator[Any, None]:
        """One connection: yields its new events, then `_DONE` when the run is over."""
        cursor = self._cursor
        args = self._transport.request_args(cursor.open_call(self._create_body, self._key))
        async with self._transport.http.stream(**args) as response:
            if response.status_code == 204:
                yield _DONE
                return
            if not response.is_success:
                await response.aread()
                raise error_from_response(response)
            if _is_json(response):
                await response.aread()
                cursor.adopt_run(response)
                return
            cursor.adopt_location(response)
            parser = FrameParser()
            async for line in response.aiter_lines():
                frame = parser.feed(line)
                if frame is None:
                    continue
                event = frame_event(frame)
                if not cursor.accept(event):
                    continue
                yield event
                if event.kind == "input_required" and self._on_input is not None:
                    await self._answer(event)
                if cursor.final is not None:
                    return

    async def _answer(self, event: Any) -> None:
        value = self._on_input(event.data)  # type: ignore[misc]
        if inspect.isawaitable(value):
            value = await value
        body = {"step_id": _field(event.data, "step_id"), "value": value}
        try:
            await self._transport(Call("POST", f"/v1/runs/{self.run_id}/input", body=body, cast=models.Run))
        except ConflictError:
            pass  # see RunStream._answer


_DONE = object()
