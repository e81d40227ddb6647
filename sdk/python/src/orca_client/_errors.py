"""Exceptions: one base class, a subclass per HTTP status family, and transport failures.

Every error the server sends is an RFC 9457 problem document; its members are kept on the
exception (`status`, `code`, `title`, `detail`, `errors`) with `retry_after` from the header.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class FieldError:
    """One problem of a 422: where it is (a JSON Pointer) and what is wrong."""

    pointer: str
    message: str


class OrcaError(Exception):
    """Base of every error this library raises."""

    status: int | None = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        title: str | None = None,
        detail: str | None = None,
        errors: list[FieldError] | None = None,
        retry_after: float | None = None,
        problem: dict[str, Any] | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.errors = errors or []
        self.retry_after = retry_after
        self.problem = problem or {}
        self.response = response


class APIConnectionError(OrcaError):
    """The server could not be reached, or the connection broke before an answer."""


class APITimeoutError(APIConnectionError):
    """The request took longer than the client's timeout."""


class StreamError(OrcaError):
    """An event stream broke its contract (a gap in `seq`, an unparsable event)."""


class BadRequestError(OrcaError):
    status = 400


class AuthenticationError(OrcaError):
    status = 401


class PermissionDeniedError(OrcaError):
    status = 403


class NotFoundError(OrcaError):
    status = 404


class ConflictError(OrcaError):
    status = 409


class UnprocessableEntityError(OrcaError):
    status = 422


class RateLimitedError(OrcaError):
    status = 429


class ServerError(OrcaError):
    """Any 5xx; `status` says which (503 `overloaded` carries `retry_after`)."""


_BY_STATUS: dict[int, type[OrcaError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitedError,
}


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a `Retry-After` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_from_response(response: httpx.Response) -> OrcaError:
    """The exception for a 4xx/5xx answer, built from its problem document (already read)."""
    status = response.status_code
    try:
        problem = response.json()
        if not isinstance(problem, dict):
            problem = {}
    except ValueError:
        problem = {}
    errors = [
        FieldError(pointer=str(e.get("pointer", "")), message=str(e.get("message", "")))
        for e in problem.get("errors") or []
        if isinstance(e, dict)
    ]
    title = problem.get("title")
    detail = problem.get("detail")
    code = problem.get("code")
    summary = detail or title or response.reason_phrase or "error"
    message = f"{status} {code}: {summary}" if code else f"{status}: {summary}"
    if errors:
        message += "".join(f"\n  {e.pointer}: {e.message}" for e in errors)
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else OrcaError)
    return cls(
        message,
        status=status,
        code=code,
        title=title,
        detail=detail,
        errors=errors,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
        problem=problem,
        response=response,
    )
