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


def worker_use() -> None:
    from orca_client.worker import Retry, TaskContext, Worker

    worker = Worker(queue="billing", concurrency=8, grace=5.0)

    @worker.tool(name="billing.charge", heartbeat_ms=5000, retry=Retry(max_attempts=5))
    def charge(amount: int, ctx: TaskContext, currency: str = "EUR") -> dict[str, object]:
        ctx.heartbeat({"step": "charging"})
        assert_type(ctx.idempotency_key, str)
        return {"charged": amount, "currency": currency, "cancelled": ctx.cancelled}

    @worker.tool
    async def lookup(customer: str, ctx: TaskContext) -> str:
        await ctx.aheartbeat()
        return customer

    assert_type(charge(1, ctx=TaskContext.__new__(TaskContext)), dict[str, object])
    worker.run(declare=True)
