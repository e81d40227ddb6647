// The Worker library (`@orca/client/worker`) in real worker processes against a real orca: the
// example worker (examples/workers/typescript/worker.mjs, copied next to this file so that it
// imports the installed package) runs as a node child process, writes one JSON line per thing
// it did, and the tests read that log and the server's runs and tasks.
//
// Covered: declare(); calls at the top level and inside `sequential` and `parallel`; a kill -9 of
// a worker mid-task (offered again, same idempotency key); three processes sharing 300 tasks,
// each done once; a cancelled run aborting the function's signal; SIGTERM handing a task back
// past the grace, or letting it finish within it.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { Client } from "@orca/client";
import { startOrca, waitFor } from "./harness.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = process.env.ORCA_OPENAPI ? dirname(process.env.ORCA_OPENAPI) : join(HERE, "..", "..", "..");
const EXAMPLE = join(HERE, "example-worker.mjs");
copyFileSync(join(ROOT, "examples", "workers", "typescript", "worker.mjs"), EXAMPLE);

function lines(log) {
  if (!existsSync(log)) return [];
  return readFileSync(log, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

const call = (id, tool, args) => ({ id, kind: "tool", input: { tool, arguments: args } });

describe("worker processes", () => {
  let orca;
  let client;
  let dir;
  let log;
  let serial = 0;
  const processes = [];

  before(async () => {
    orca = await startOrca();
    client = new Client({ baseURL: orca.url });
  });
  after(async () => {
    for (const p of processes) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
    await orca?.close();
  });

  /** Starts the example worker (queue of its own per test) and waits until it polls: each
   * worker's name is new, or an earlier worker's recent poll would pass for this one's. */
  async function startWorker(name, queue, env = {}) {
    const environment = { ...process.env, ORCA_URL: orca.url, ORCA_WORKER_LOG: log, ORCA_WORKER_ID: name, ORCA_WORKER_QUEUE: queue, ...env };
    delete environment.ORCA_API_KEY;
    const proc = spawn(process.execPath, [EXAMPLE], {
      env: environment,
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    proc.stderr.on("data", (chunk) => (stderr = (stderr + chunk).slice(-4000)));
    proc.exited = new Promise((resolve) => proc.once("exit", (code, signal) => resolve({ code, signal })));
    processes.push(proc);
    await waitFor(`worker ${name} to poll`, async () => {
      if (proc.exitCode !== null) throw new Error(`worker ${name} exited: ${stderr}`);
      return (await client.workers.list()).some((w) => w.worker_id === name);
    });
    return proc;
  }

  /** A fresh log and queue for one test (the tool declarations are the tenant's, shared). */
  function fresh() {
    dir ??= mkdtempSync(join(tmpdir(), "orca-ts-workers-"));
    log = join(dir, `worker-${++serial}.jsonl`);
    return `q${serial}`;
  }

  const started = () => lines(log).some((l) => l.event === "start");
  const fixed = (...steps) => client.runs.create({ input: "x", orchestration: "fixed", plan: { steps } });
  const onlyTask = async (runId) => {
    const all = [];
    for await (const t of client.tasks.list({ run_id: runId })) all.push(t);
    assert.equal(all.length, 1, JSON.stringify(all));
    return all[0];
  };

  test("declare() puts the tools, and calls at every nesting level succeed", async () => {
    const queue = fresh();
    await startWorker("w-levels", queue);
    const tool = await client.tools.get("text.shout");
    assert.equal(tool.kind, "worker");
    assert.equal(tool.worker.queue, queue);
    assert.equal(tool.worker.heartbeat_ms, 1000);
    assert.deepEqual(tool.worker.input_schema.required, ["text"]);
    const run = await client.runs.run({
      input: "x",
      orchestration: "fixed",
      plan: {
        steps: [
          call("top", "text.shout", { text: "top" }),
          { id: "seq", kind: "sequential", input: { steps: [call("inner", "text.count", { text: "a b c" })] } },
          { id: "par", kind: "parallel", input: { steps: [call("p1", "text.shout", { text: "left" }), call("p2", "text.count", { text: "abcd", unit: "chars" })] } },
        ],
      },
    });
    assert.equal(run.status, "succeeded", JSON.stringify(run.error));
    const steps = Object.fromEntries((await client.runs.steps(run.id)).map((s) => [s.step_id, s.output]));
    assert.deepEqual(
      { top: steps.top, inner: steps.inner, p1: steps.p1, p2: steps.p2 },
      { top: { text: "TOP" }, inner: { count: 3 }, p1: { text: "LEFT" }, p2: { count: 4 } },
    );
    assert.deepEqual(lines(log).map((l) => l.event).sort(), ["done", "done", "done", "done", "start", "start", "start", "start"]);
  });

  test("a worker killed mid-task loses it to another, with the same idempotency key", async () => {
    const queue = fresh();
    const first = await startWorker("w-first", queue);
    const run = await fixed(call("s", "text.shout", { text: "once", hold_first: 60 }));
    await waitFor("the first attempt", started);
    first.kill("SIGKILL");
    await first.exited;
    await startWorker("w-second", queue);
    const done = await client.runs.join(run.id).finalRun();
    assert.equal(done.status, "succeeded");
    assert.deepEqual(done.output, { text: "ONCE" });
    const task = await onlyTask(run.id);
    assert.equal(task.status, "completed");
    assert.equal(task.attempt, 2);
    const starts = lines(log).filter((l) => l.event === "start");
    assert.deepEqual(starts.map((s) => [s.worker, s.attempt]), [["w-first", 1], ["w-second", 2]]);
    assert.equal(starts[0].key, task.idempotency_key);
    assert.equal(starts[1].key, task.idempotency_key);
  });

  test("three worker processes share 300 tasks and do each once", async () => {
    const queue = fresh();
    for (const i of [0, 1, 2]) await startWorker(`w-share-${i}`, queue, { ORCA_WORKER_CONCURRENCY: "8" });
    const runs = [];
    for (let i = 0; i < 30; i++) {
      const steps = Array.from({ length: 10 }, (_, j) => call(`c${j}`, "text.shout", { text: `${i}-${j}` }));
      runs.push(await fixed({ id: "fan", kind: "parallel", input: { steps } }));
    }
    const keys = new Set();
    for (const run of runs) {
      assert.equal((await client.runs.join(run.id).finalRun()).status, "succeeded");
      for await (const t of client.tasks.list({ run_id: run.id })) {
        assert.equal(t.status, "completed");
        assert.equal(t.attempt, 1);
        keys.add(t.idempotency_key);
      }
    }
    assert.equal(keys.size, 300);
    const done = lines(log).filter((l) => l.event === "done");
    assert.equal(done.length, 300, "each task done once");
    assert.deepEqual(new Set(done.map((l) => l.key)), keys);
    assert.equal(new Set(done.map((l) => l.worker)).size, 3, "every process took a share");
  });

  test("cancelling the run aborts the function's signal", async () => {
    const queue = fresh();
    await startWorker("w-cancel", queue);
    const run = await fixed(call("s", "text.shout", { text: "long", hold_first: 60 }));
    await waitFor("the task to start", started);
    await client.runs.cancel(run.id);
    const cancelled = await waitFor("the function to hear of it", () => lines(log).find((l) => l.event === "cancelled"));
    assert.equal(cancelled.reason, "TaskCancelledError");
    assert.equal((await onlyTask(run.id)).status, "cancelled");
    assert.equal((await client.runs.get(run.id)).status, "cancelled");
    assert.ok(!lines(log).some((l) => l.event === "done"));
  });

  test("SIGTERM hands a task back once the grace is over", async () => {
    const queue = fresh();
    const first = await startWorker("w-leaving", queue, { ORCA_WORKER_GRACE_MS: "300" });
    const run = await fixed(call("s", "text.shout", { text: "handed", hold_first: 60 }));
    await waitFor("the task to start", started);
    first.kill("SIGTERM");
    assert.deepEqual(await first.exited, { code: 0, signal: null });
    const handed = await onlyTask(run.id);
    assert.equal(handed.status, "queued");
    assert.equal(handed.error?.code, "worker_shutdown");
    await startWorker("w-taking", queue);
    const done = await client.runs.join(run.id).finalRun();
    assert.equal(done.status, "succeeded");
    assert.deepEqual(done.output, { text: "HANDED" });
    const task = await onlyTask(run.id);
    assert.equal(task.attempt, 2);
    assert.deepEqual(lines(log).map((l) => [l.worker, l.event]), [
      ["w-leaving", "start"], ["w-leaving", "cancelled"], ["w-taking", "start"], ["w-taking", "done"],
    ]);
  });

  test("SIGTERM within the grace lets the task finish", async () => {
    const queue = fresh();
    const first = await startWorker("w-kept", queue, { ORCA_WORKER_GRACE_MS: "30000" });
    const run = await fixed(call("s", "text.shout", { text: "kept", hold_first: 1.5 }));
    await waitFor("the task to start", started);
    first.kill("SIGTERM");
    assert.deepEqual(await first.exited, { code: 0, signal: null });
    const done = await client.runs.join(run.id).finalRun();
    assert.equal(done.status, "succeeded");
    assert.deepEqual(done.output, { text: "KEPT" });
    const task = await onlyTask(run.id);
    assert.equal(task.attempt, 1);
    assert.deepEqual(lines(log).map((l) => l.event), ["start", "done"]);
  });
});
