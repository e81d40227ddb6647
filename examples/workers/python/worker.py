"""An example orca worker in Python: serves `text.shout` and `text.count` from queue `examples`.

    pip install ./sdk/python
    ORCA_URL=http://127.0.0.1:8080 python examples/workers/python/worker.py

It declares both tools (PUT /v1/tools/...) and serves until Ctrl-C or SIGTERM, when it lets
the tasks in flight finish for up to 10 s and hands the rest back. Then a run can call them:

    curl -s localhost:8080/v1/runs -H 'content-type: application/json' -d '{"input": "hi",
      "orchestration": "fixed", "plan": {"steps": [{"id": "s", "kind": "tool",
      "input": {"tool": "text.shout", "arguments": {"text": "hello"}}}]}}'

Set ORCA_WORKER_LOG to a file to have each task written there as one JSON line (the SDK's
tests watch it).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Annotated, Literal

from orca_client.worker import Retry, TaskContext, Worker

worker = Worker(
    queue=os.environ.get("ORCA_WORKER_QUEUE", "examples"),
    concurrency=int(os.environ.get("ORCA_WORKER_CONCURRENCY", "4")),
    grace=float(os.environ.get("ORCA_WORKER_GRACE", "10")),
    worker_id=os.environ.get("ORCA_WORKER_ID"),
)


def note(ctx: TaskContext, event: str, **more: object) -> None:
    """One JSON line per thing that happened, when ORCA_WORKER_LOG names a file."""
    path = os.environ.get("ORCA_WORKER_LOG")
    if not path:
        return
    line = {"worker": worker.worker_id, "pid": os.getpid(), "event": event, "task": ctx.task_id,
            "key": ctx.idempotency_key, "attempt": ctx.attempt, **more}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()


@worker.tool(name="text.shout", heartbeat_ms=1000, retry=Retry(max_attempts=3, backoff_ms=10))
def shout(
    text: Annotated[str, "The text to upper-case."],
    ctx: TaskContext,
    hold_first: Annotated[float, "Seconds to work on the first attempt (to show heartbeats)."] = 0,
) -> dict:
    """Upper-cases a text (a plain function: it runs in a thread)."""
    note(ctx, "start")
    hold = hold_first if ctx.attempt == 1 else 0
    end = time.monotonic() + hold
    while time.monotonic() < end:
        ctx.heartbeat({"left_s": round(end - time.monotonic(), 1)})
        if ctx.wait(min(0.2, max(0.0, end - time.monotonic()))):
            note(ctx, "cancelled", reason=ctx.cancel_reason)
            return {}
    note(ctx, "done")
    return {"text": text.upper()}


@worker.tool(name="text.count", heartbeat_ms=1000, retry=Retry(max_attempts=3, backoff_ms=10))
async def count(
    text: str,
    ctx: TaskContext,
    unit: Literal["words", "chars"] = "words",
    hold_first: float = 0,
) -> dict:
    """Counts the words or characters of a text (an async function: cancelled on the loop)."""
    import asyncio

    note(ctx, "start")
    try:
        if ctx.attempt == 1 and hold_first:
            await ctx.aheartbeat("counting")
            await asyncio.sleep(hold_first)
    except asyncio.CancelledError:
        note(ctx, "cancelled", reason=ctx.cancel_reason)
        raise
    note(ctx, "done")
    return {"count": len(text.split()) if unit == "words" else len(text)}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    worker.run(declare=True)
