"""When to retry a request and how long to wait: pure functions shared by both clients."""

from __future__ import annotations

import random

from ._errors import APIConnectionError, OrcaError

#: Statuses worth another try: over a quota or rate (429) and overloaded (503).
RETRYABLE_STATUSES = frozenset({429, 503})
#: Methods that can be sent again without changing the outcome.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})

INITIAL_DELAY = 0.5
MAX_DELAY = 8.0
#: The most a server's `Retry-After` makes the client wait before giving up on it.
MAX_RETRY_AFTER = 60.0


def is_retryable(error: OrcaError) -> bool:
    """A connection failure or timeout, a 429 or a 503."""
    return isinstance(error, APIConnectionError) or error.status in RETRYABLE_STATUSES


def may_resend(method: str, headers: dict[str, str] | None) -> bool:
    """Idempotent methods, and POSTs that carry an `Idempotency-Key`."""
    if method.upper() in IDEMPOTENT_METHODS:
        return True
    return any(k.lower() == "idempotency-key" for k in (headers or {}))


def backoff(attempt: int) -> float:
    """Exponential backoff with full jitter, capped: attempt 0 waits up to 0.5 s, then 1 s..."""
    ceiling = min(MAX_DELAY, INITIAL_DELAY * (2**attempt))
    return random.uniform(ceiling / 2, ceiling)


def retry_delay(attempt: int, error: OrcaError) -> float | None:
    """Seconds before the next try; None when the server asks for longer than we wait."""
    if error.retry_after is not None:
        if error.retry_after > MAX_RETRY_AFTER:
            return None
        return error.retry_after
    return backoff(attempt)
