"""Type-checked by mypy in .ci/sdk-python (never run): what a caller of each client sees."""

from typing import assert_type

from orca_client import AsyncClient, Client, models


def sync_use(client: Client) -> str:
    run: models.RunDetail = client.runs.run(input="hi")
    for r in client.runs.list(status="succeeded"):
        assert_type(r, models.Run)
    for e in client.runs.stream(input="x"):
        if isinstance(e, models.TokenEvent):
            return e.data.text
    return str(run.status)


async def async_use(client: AsyncClient) -> None:
    run = await client.runs.get("x")
    assert_type(run, models.RunDetail)
    async for r in client.runs.list(q="a"):
        assert_type(r, models.Run)
    async for e in client.runs.stream(input="x"):
        assert_type(e, models.Event)
    v = await client.workflows.versions.list("x")
    assert_type(v, models.VersionList)
