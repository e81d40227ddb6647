"""Lazy iteration over every page of a list: the next page is fetched only when needed."""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Generic, Iterator, Mapping, TypeVar

import httpx

from ._transport import AsyncTransport, Call, SyncTransport, decode

T = TypeVar("T")

#: From one page's answer: its items, and the query for the next page (None: the last page).
PageReader = Callable[[httpx.Response, Any], "tuple[list[Any], dict[str, Any] | None]"]


def cursor_pages(items_field: str) -> PageReader:
    """Pages chained by `next_cursor` in the body (runs, sessions)."""

    def read(response: httpx.Response, page: Any) -> tuple[list[Any], dict[str, Any] | None]:
        cursor = getattr(page, "next_cursor", None)
        return list(getattr(page, items_field)), ({"cursor": cursor} if cursor else None)

    return read


def after_id_pages(response: httpx.Response, page: Any) -> tuple[list[Any], dict[str, Any] | None]:
    """Pages chained by a `Link: rel="next"` header, continued `after` the last item's id."""
    items = list(page)
    if "next" not in response.links or not items:
        return items, None
    return items, {"after": items[-1].id}


class Pager(Generic[T]):
    """Every item of every page, fetched lazily; the first query's filters stay on each page."""

    def __init__(self, transport: SyncTransport, call: Call, read: PageReader) -> None:
        self._transport, self._call, self._read = transport, call, read

    def pages(self) -> Iterator[list[T]]:
        params: Mapping[str, Any] = dict(self._call.params or {})
        while True:
            call = Call(self._call.method, self._call.path, params, cast=self._call.cast)
            response = self._transport.send(call)
            items, following = self._read(response, decode(response, call.cast))
            yield items
            if following is None:
                return
            params = {**params, **following}

    def __iter__(self) -> Iterator[T]:
        for page in self.pages():
            yield from page


class AsyncPager(Generic[T]):
    """The async twin of `Pager`: `async for item in client.runs.list(...)`."""

    def __init__(self, transport: AsyncTransport, call: Call, read: PageReader) -> None:
        self._transport, self._call, self._read = transport, call, read

    async def pages(self) -> AsyncIterator[list[T]]:
        params: Mapping[str, Any] = dict(self._call.params or {})
        while True:
            call = Call(self._call.method, self._call.path, params, cast=self._call.cast)
            response = await self._transport.send(call)
            items, following = self._read(response, decode(response, call.cast))
            yield items
            if following is None:
                return
            params = {**params, **following}

    async def __aiter__(self) -> AsyncIterator[T]:
        async for page in self.pages():
            for item in page:
                yield item
