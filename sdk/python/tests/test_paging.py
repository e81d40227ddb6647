"""Lists iterate lazily over every page, the filters kept on each page."""

from __future__ import annotations

import httpx

import orca_client


def test_paging_over_250_runs_with_a_filter(orca):
    with orca_client.Client(orca.url) as setup:
        for i in range(250):
            setup.runs.create(input=f"{'alpha' if i % 2 == 0 else 'beta'} number {i}", orchestration="simple")

    requests: list[httpx.Request] = []
    http = httpx.Client(event_hooks={"request": [requests.append]})
    with orca_client.Client(orca.url, http_client=http) as client:
        pager = client.runs.list(q="ALPHA", limit=50)
        assert requests == [], "listing must not fetch before iterating"
        runs = list(pager)
        assert len(runs) == 125
        assert len({r.id for r in runs}) == 125
        assert all(r.input.startswith("alpha") for r in runs)
        created = [r.created_at for r in runs]
        assert created == sorted(created, reverse=True), "newest first across pages"
        pages = [r for r in requests if r.url.path == "/v1/runs"]
        assert len(pages) == 3
        for page in pages:
            assert page.url.params["q"] == "ALPHA" and page.url.params["limit"] == "50"
        assert "cursor" not in pages[0].url.params
        assert all("cursor" in p.url.params for p in pages[1:])

        # Stopping early fetches no further page.
        requests.clear()
        first_60 = []
        for run in client.runs.list(limit=50):
            first_60.append(run)
            if len(first_60) == 60:
                break
        assert len(requests) == 2
        assert len(list(client.runs.list(limit=200))) == 250
    http.close()


async def test_async_paging_keeps_filters(orca):
    with orca_client.Client(orca.url) as setup:
        for i in range(30):
            setup.runs.create(input=f"{'alpha' if i % 3 == 0 else 'beta'} {i}", orchestration="simple", metadata={"batch": "p"})
    async with orca_client.AsyncClient(orca.url) as client:
        runs = [r async for r in client.runs.list(q="alpha", metadata={"batch": "p"}, limit=3)]
        assert len(runs) == 10 and all(r.input.startswith("alpha") for r in runs)
        pages = [len(page) async for page in client.runs.list(metadata={"batch": "p"}, limit=7).pages()]
        assert pages == [7, 7, 7, 7, 2]
