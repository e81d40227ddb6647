// An example orca worker in TypeScript/JavaScript: serves `text.shout` and `text.count` from the
// queue `examples` (as examples/workers/python/worker.py does), then runs until SIGTERM/SIGINT,
// when it lets the tasks in flight finish for up to 10 s and hands the rest back.
//
//   npm install @orca/client          (or the tarball `npm pack` makes in sdk/typescript)
//   ORCA_URL=http://127.0.0.1:8080 node worker.mjs
//
// ORCA_WORKER_LOG names a file to get one JSON line per thing a task did (the SDK's tests
// watch it); ORCA_WORKER_QUEUE, ORCA_WORKER_ID, ORCA_WORKER_CONCURRENCY and ORCA_WORKER_GRACE_MS
// change the defaults.
import { appendFileSync } from "node:fs";
import { Client } from "@orca/client";
import { Worker } from "@orca/client/worker";

const env = process.env;
const worker = new Worker(new Client(), {
  queue: env.ORCA_WORKER_QUEUE ?? "examples",
  workerId: env.ORCA_WORKER_ID,
  concurrency: Number(env.ORCA_WORKER_CONCURRENCY ?? 4),
  grace: Number(env.ORCA_WORKER_GRACE_MS ?? 10_000),
  logger: { info: (m) => console.error(m), warn: (m) => console.error(m), error: (m) => console.error(m) },
});

function note(ctx, event, more = {}) {
  if (!env.ORCA_WORKER_LOG) return;
  const line = { worker: worker.workerId, pid: process.pid, event, task: ctx.taskId, key: ctx.idempotencyKey, attempt: ctx.attempt, ...more };
  appendFileSync(env.ORCA_WORKER_LOG, JSON.stringify(line) + "\n");
}

/** Resolves after `ms`, or false at once when `signal` aborts. */
function hold(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const timer = setTimeout(() => resolve(true), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve(false);
    }, { once: true });
  });
}

const retry = { maxAttempts: 3, backoffMs: 10 };

worker.tool(
  {
    name: "text.shout",
    description: "Upper-cases a text.",
    inputSchema: {
      type: "object", required: ["text"], additionalProperties: false,
      properties: { text: { type: "string" }, hold_first: { type: "number", description: "Seconds to work on the first attempt." } },
    },
    heartbeatMs: 1000,
    retry,
  },
  async ({ text, hold_first = 0 }, ctx) => {
    note(ctx, "start");
    if (ctx.attempt === 1 && hold_first > 0) {
      await ctx.heartbeat({ left_s: hold_first });
      if (!(await hold(hold_first * 1000, ctx.signal))) {
        note(ctx, "cancelled", { reason: ctx.signal.reason?.constructor?.name });
        return {};
      }
    }
    note(ctx, "done");
    return { text: text.toUpperCase() };
  },
);

worker.tool(
  {
    name: "text.count",
    description: "Counts the words or characters of a text.",
    inputSchema: {
      type: "object", required: ["text"], additionalProperties: false,
      properties: { text: { type: "string" }, unit: { enum: ["words", "chars"] } },
    },
    heartbeatMs: 1000,
    retry,
  },
  ({ text, unit = "words" }, ctx) => {
    note(ctx, "start");
    note(ctx, "done");
    return { count: unit === "words" ? text.split(/\s+/).filter(Boolean).length : text.length };
  },
);

await worker.declare();
console.error(`worker ${worker.workerId} serving ${worker.toolNames.join(", ")} from ${worker.queue}`);
await worker.run();
