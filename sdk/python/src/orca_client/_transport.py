"""Sending requests: URL and headers, retries, decoding answers into generated types.

`SyncTransport` and `AsyncTransport` share everything but the I/O; the resources build a
`Call` and hand it to whichever transport their client has, so both clients have one surface.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping

import httpx
from pydantic import BaseModel, TypeAdapter

from ._errors import APIConnectionError, APITimeoutError, OrcaError, error_from_response
from ._retry import is_retryable, may_resend, retry_delay
from ._version import __version__

#: `cast` for an answer whose body is text (e.g. /metrics).
TEXT = "text"


@dataclass(frozen=True)
class Call:
    """One HTTP exchange as a resource describes it."""

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    #: What the JSON answer is validated into (a generated model, `list[Model]`...); None: no body.
    cast: Any = None


@lru_cache(maxsize=None)
def _adapter(tp: Any) -> TypeAdapter:
    return TypeAdapter(tp)


def to_json(body: Any) -> Any:
    """A request body as JSON values: generated models keep only the fields that were set."""
    if isinstance(body, BaseModel):
        return body.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(body, Mapping):
        return {k: to_json(v) for k, v in body.items()}
    if isinstance(body, (list, tuple)):
        return [to_json(v) for v in body]
    return body


def clean_params(params: Mapping[str, Any] | None) -> dict[str, str]:
    """Query parameters without the unset ones; datetimes as RFC 3339, booleans in lowercase."""
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        if hasattr(value, "isoformat"):
            value = value.isoformat()
        elif isinstance(value, bool):
            value = "true" if value else "false"
        out[key] = str(value)
    return out


def with_idempotency_key(key: str | None) -> dict[str, str]:
    """The header for a create; a fresh UUID when the caller gives none (kept across retries)."""
    return {"Idempotency-Key": key or str(uuid.uuid4())}


@dataclass(frozen=True)
class Decoder:
    """A `cast` that needs more than validation: `fn` gets the validated `of` value."""

    of: Any
    fn: Callable[[Any], Any]


def decode(response: httpx.Response, cast: Any) -> Any:
    if cast is None or response.status_code == 204:
        return None
    if cast == TEXT:
        return response.text
    if isinstance(cast, Decoder):
        return cast.fn(decode(response, cast.of))
    return _adapter(cast).validate_json(response.content)


class BaseTransport:
    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        timeout: float | httpx.Timeout,
        max_retries: int,
        headers: Mapping[str, str] | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.headers = {"User-Agent": f"orca-client-python/{__version__}", "Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.headers.update(headers or {})

    def url(self, path: str) -> str:
        return self.base_url + path

    def request_args(self, call: Call, extra_headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        headers = {**self.headers, **call.headers, **(extra_headers or {})}
        args: dict[str, Any] = {
            "method": call.method,
            "url": self.url(call.path),
            "params": clean_params(call.params),
            "headers": headers,
            "timeout": self.timeout,
        }
        if call.body is not None:
            args["json"] = to_json(call.body)
        return args

    def should_retry(self, call: Call, error: OrcaError, attempt: int) -> float | None:
        """Seconds to wait before trying `call` again, or None to give up."""
        if attempt >= self.max_retries or not is_retryable(error):
            return None
        if not may_resend(call.method, dict(call.headers)):
            return None
        return retry_delay(attempt, error)


def transport_error(exc: httpx.TransportError) -> APIConnectionError:
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"request timed out: {exc!r}")
    return APIConnectionError(f"connection failed: {exc!r}")


class SyncTransport(BaseTransport):
    def __init__(self, *, http_client: httpx.Client | None, **kw: Any) -> None:
        super().__init__(**kw)
        self.owns_http = http_client is None
        self.http = http_client or httpx.Client()
        self.sleep: Callable[[float], None] = time.sleep

    def send(self, call: Call) -> httpx.Response:
        """The 2xx answer to `call` (read), retrying as the policy allows; raises otherwise."""
        attempt = 0
        while True:
            try:
                response = self.http.request(**self.request_args(call))
            except httpx.TransportError as exc:
                error: OrcaError = transport_error(exc)
            else:
                if response.is_success:
                    return response
                error = error_from_response(response)
            delay = self.should_retry(call, error, attempt)
            if delay is None:
                raise error
            self.sleep(delay)
            attempt += 1

    def __call__(self, call: Call) -> Any:
        return decode(self.send(call), call.cast)

    def close(self) -> None:
        if self.owns_http:
            self.http.close()


class AsyncTransport(BaseTransport):
    def __init__(self, *, http_client: httpx.AsyncClient | None, **kw: Any) -> None:
        super().__init__(**kw)
        self.owns_http = http_client is None
        self.http = http_client or httpx.AsyncClient()

    async def send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self.http.request(**self.request_args(call))
            except httpx.TransportError as exc:
                error: OrcaError = transport_error(exc)
            else:
                if response.is_success:
                    return response
                error = error_from_response(response)
            delay = self.should_retry(call, error, attempt)
            if delay is None:
                raise error
            await asyncio.sleep(delay)
            attempt += 1

    async def __call__(self, call: Call) -> Any:
        return decode(await self.send(call), call.cast)

    async def close(self) -> None:
        if self.owns_http:
            await self.http.aclose()
