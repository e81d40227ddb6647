"""orca_client: the Python client for orca (see sdk/python/README.md).

`Client` (synchronous) and `AsyncClient` (asyncio) have the same resources: `runs`,
`workflows`, `agents`, `tools`, `functions`, `schedules`, `sessions`, `usage`, `models`,
`definitions`, `workers`, `tasks`. Request and response types are in `orca_client.models`, generated from
openapi.yaml.
"""

from . import models
from ._client import AsyncClient, Client
from ._errors import (
    APIConnectionError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    FieldError,
    NotFoundError,
    OrcaError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    StreamError,
    UnprocessableEntityError,
)
from ._paging import AsyncPager, Pager
from ._sse import UnknownEvent
from ._streaming import AsyncRunStream, RunStream
from ._version import __version__

__all__ = [
    "APIConnectionError",
    "APITimeoutError",
    "AsyncClient",
    "AsyncPager",
    "AsyncRunStream",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "FieldError",
    "NotFoundError",
    "OrcaError",
    "Pager",
    "PermissionDeniedError",
    "RateLimitedError",
    "RunStream",
    "ServerError",
    "StreamError",
    "UnknownEvent",
    "UnprocessableEntityError",
    "__version__",
    "models",
]
