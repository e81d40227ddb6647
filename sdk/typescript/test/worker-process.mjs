// A worker process for worker.test.mjs: the SDK's Worker (from the installed package) serving
// `<ns>.shout` on the queue `<ns>` until SIGTERM. Its configuration is argv[2] (JSON):
//   { url, ns, log, workerId?, concurrency?, grace?, heartbeatMs?, backoffMs?, declare? }
// It appends what it does to `log`, one JSON line each, written synchronously (a SIGKILL loses
// nothing written): {event, pid, worker, task, key, attempt, ...}. Events: ready (polling
// about to start), start (the function was called), aborted (its ctx.signal fired; `reason` is
// the reason's class), done (the function returned), exit (run() resolved), failed (run() rejected).
//
// The tool's arguments steer the function: `text` (upper-cased into the output), `ms` (take this
// long first), `hang_attempts` (on attempts up to this one, wait for ctx.signal instead),
// `throw_attempts` with `throw_kind` (on attempts up to this one throw: `plain` an Error, `final` a
// NonRetryableError, `custom` a TaskFailure code `card_declined` not retryable), `progress`
// (heartbeat with it first), `big` (return a text of this many characters).
import { appendFileSync } from "node:fs";
import { Client } from "@orca/client";
import { NonRetryableError, TaskFailure, Worker } from "@orca/client/worker";

const config = JSON.parse(process.argv[2]);
const worker = new Worker(new Client({ baseURL: config.url, maxRetries: 0 }), {
  queue: config.ns,
  workerId: config.workerId,
  concurrency: config.concurrency ?? 4,
  grace: config.grace ?? 30_000,
  waitMs: config.waitMs ?? 10_000,
  logger: { info: () => {}, warn: (m) => record({ event: "warn", message: m }), error: (m) => record({ event: "error", message: m }) },
});

function record(entry) {
  appendFileSync(config.log, JSON.stringify({ ...entry, pid: process.pid, worker: worker.workerId }) + "\n");
}

worker.tool(
  {
    name: `${config.ns}.shout`,
    description: "Upper-cases a text.",
    inputSchema: {
      type: "object",
      required: ["text"],
      properties: {
        text: { type: "string" },
        ms: { type: "integer" },
        hang_attempts: { type: "integer" },
        throw_attempts: { type: "integer" },
        throw_kind: { enum: ["plain", "final", "custom"] },
        progress: {},
        big: { type: "integer" },
      },
    },
    heartbeatMs: config.heartbeatMs ?? 1_000,
    retry: { maxAttempts: 3, backoffMs: config.backoffMs ?? 100, maxBackoffMs: 1_000 },
  },
  async ({ text, ms, hang_attempts, throw_attempts, throw_kind, progress, big }, ctx) => {
    const what = { task: ctx.taskId, key: ctx.idempotencyKey, attempt: ctx.attempt, run: ctx.runId };
    record({ event: "start", ...what });
    if (progress !== undefined) await ctx.heartbeat(progress);
    if (throw_attempts !== undefined && ctx.attempt <= throw_attempts) {
      record({ event: "throw", kind: throw_kind, ...what });
      if (throw_kind === "final") throw new NonRetryableError(`no way: ${text}`);
      if (throw_kind === "custom") throw new TaskFailure("card_declined", `declined: ${text}`, { retryable: false });
      throw new Error(`flaky: ${text}`);
    }
    if (hang_attempts !== undefined && ctx.attempt <= hang_attempts) {
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
      record({ event: "aborted", reason: ctx.signal.reason?.constructor?.name, ...what });
      throw ctx.signal.reason;
    }
    if (ms) await new Promise((resolve) => setTimeout(resolve, ms));
    record({ event: "done", ...what });
    return { text: big ? "x".repeat(big) : text.toUpperCase() };
  },
);

if (config.declare ?? true) await worker.declare();
record({ event: "ready" });
try {
  await worker.run();
  record({ event: "exit" });
} catch (error) {
  record({ event: "failed", message: String(error?.message ?? error) });
  process.exitCode = 1;
}
