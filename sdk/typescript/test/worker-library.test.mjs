// The Worker library (`@orca/client/worker`) in real worker processes (test/worker-process.mjs,
// node child processes importing the installed package) against a real orca: workflows calling
// a worker tool, a kill -9 mid-task, 3 processes sharing 300 tasks, a cancel reaching the
// function's signal, graceful shutdown (hand back / finish), declare(), thrown errors, a claim
// lost while paused, a refused output and a stop with orca unreachable. Each test uses its own
// queue and tool (`<ns>.shout` on `<ns>`). The example worker is tested in worker.test.mjs.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { Client } from "@orca/client";
import { startOrca, waitFor } from "./harness.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const TERMINAL = ["succeeded", "failed", "cancelled", "timed_out"];

/** A tool step calling `<ns>.shout`. */
function shout(id, ns, args) {
  return { id, kind: "tool", input: { tool: `${ns}.shout`, arguments: args } };
}

/** The JSON lines a worker log holds so far. */
function readLog(path) {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line));
}

/** Waits until the log has an entry matching `match`; returns it. */
function waitLog(path, what, match, ms = 20_000) {
  return waitFor(what, () => readLog(path).find(match), ms);
}

describe("Worker in worker processes", () => {
  let orca;
  let client;
  const procs = new Set();

  before(async () => {
    orca = await startOrca();
    client = new Client({ baseURL: orca.url });
  });
  after(async () => {
    for (const proc of procs) proc.kill("SIGKILL");
    await orca?.close();
  });

  /** Starts test/worker-process.mjs; its log is in the server's temp dir. */
  function startWorker(config) {
    const full = { url: orca.url, log: join(orca.dir, `${config.ns}.log`), ...config };
    const proc = spawn(process.execPath, [join(here, "worker-process.mjs"), JSON.stringify(full)], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    procs.add(proc);
    proc.output = "";
    proc.stdout.on("data", (chunk) => (proc.output += chunk));
    proc.stderr.on("data", (chunk) => (proc.output += chunk));
    proc.exited = new Promise((resolve) =>
      proc.once("exit", (code, signal) => {
        procs.delete(proc);
        resolve({ code, signal });
      }),
    );
    proc.workerId = full.workerId;
    proc.log = full.log;
    return proc;
  }

  /** Resolves with the exit once the process ends, failing after `ms`. */
  async function exitOf(proc, ms = 20_000) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`worker ${proc.workerId} did not exit within ${ms} ms:\n${proc.output}`)), ms);
    });
    try {
      return await Promise.race([proc.exited, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async function finished(runId, ms = 30_000) {
    return waitFor(`run ${runId} to end`, async () => {
      const run = await client.runs.get(runId);
      return TERMINAL.includes(run.status) && run;
    }, ms);
  }

  /** Every task of the queue, page by page. */
  async function tasksOf(queue) {
    const all = [];
    for await (const task of client.tasks.list({ queue, limit: 200 })) all.push(task);
    return all;
  }

  test("declare() PUTs the worker tool: kind worker, its queue and input schema", async () => {
    const worker = startWorker({ ns: "decl", workerId: "decl-1" });
    await waitLog(worker.log, "the worker to declare", (e) => e.event === "ready");
    const tool = await client.tools.get("decl.shout");
    assert.equal(tool.kind, "worker");
    assert.equal(tool.worker.queue, "decl");
    assert.equal(tool.worker.heartbeat_ms, 1000);
    assert.deepEqual(tool.worker.retry, { max_attempts: 3, backoff_ms: 100, max_backoff_ms: 1000 });
    assert.deepEqual(tool.input_schema.required, ["text"]);
    assert.deepEqual(Object.keys(tool.input_schema.properties).sort(), ["big", "hang_attempts", "ms", "progress", "text", "throw_attempts", "throw_kind"]);
    worker.kill("SIGTERM");
    assert.deepEqual(await exitOf(worker), { code: 0, signal: null });
    assert.ok(readLog(worker.log).some((e) => e.event === "exit"), "run() resolved on SIGTERM");
  });

  test("a fixed workflow calls the worker tool at the top level, in sequential and in parallel steps", async () => {
    const ns = "flow";
    const worker = startWorker({ ns, workerId: "flow-1" });
    await waitLog(worker.log, "the worker to declare", (e) => e.event === "ready");
    const run = await client.runs.create({
      input: "shout",
      orchestration: "fixed",
      workflow: {
        name: "shouting",
        steps: [
          shout("top", ns, { text: "top" }),
          { id: "seq", kind: "sequential", input: { steps: [shout("seq1", ns, { text: "one" }), shout("seq2", ns, { text: "two" })] } },
          { id: "par", kind: "parallel", input: { steps: [shout("par1", ns, { text: "left" }), shout("par2", ns, { text: "right", ms: 50 })] } },
        ],
      },
    });
    const done = await finished(run.id);
    assert.equal(done.status, "succeeded", JSON.stringify(done));
    assert.deepEqual(done.output, { top: { text: "TOP" }, seq: { text: "TWO" }, par: [{ text: "LEFT" }, { text: "RIGHT" }] });
    const log = readLog(worker.log).filter((e) => e.event === "done" && e.run === run.id);
    assert.equal(log.length, 5, "five calls, each run once");
    const tasks = await tasksOf(ns);
    assert.equal(tasks.length, 5);
    for (const task of tasks) {
      assert.equal(task.status, "completed");
      assert.equal(task.worker_id, "flow-1");
      assert.equal(task.attempt, 1);
    }
    worker.kill("SIGTERM");
    assert.equal((await exitOf(worker)).code, 0);
  });

  test("kill -9 mid-task: the lapsed claim is offered to another process, same idempotency key", async () => {
    const ns = "crash";
    const first = startWorker({ ns, workerId: "crash-1" });
    await waitLog(first.log, "crash-1 to declare", (e) => e.event === "ready");
    const run = await client.runs.create({
      input: "x",
      orchestration: "fixed",
      workflow: { name: "crashing", steps: [shout("only", ns, { text: "again", hang_attempts: 1 })] },
    });
    const started = await waitLog(first.log, "the first attempt to start", (e) => e.event === "start");
    assert.equal(started.attempt, 1);
    first.kill("SIGKILL");
    assert.equal((await exitOf(first)).signal, "SIGKILL");
    const second = startWorker({ ns, workerId: "crash-2" });
    const done = await finished(run.id);
    assert.equal(done.status, "succeeded", JSON.stringify(done));
    assert.deepEqual(done.output, { text: "AGAIN" }, "a single step's output is the run's");
    const starts = readLog(first.log).filter((e) => e.event === "start");
    assert.deepEqual(
      starts.map((e) => [e.worker, e.attempt, e.key, e.task]),
      [
        ["crash-1", 1, started.key, started.task],
        ["crash-2", 2, started.key, started.task],
      ],
    );
    assert.ok(!readLog(first.log).some((e) => e.event === "done" && e.worker === "crash-1"));
    const task = await client.tasks.get(started.task);
    assert.equal(task.status, "completed");
    assert.equal(task.attempt, 2);
    assert.equal(task.worker_id, "crash-2");
    second.kill("SIGTERM");
    assert.equal((await exitOf(second)).code, 0);
  });

  test("3 processes x 300 tasks: every task completed exactly once", async () => {
    const ns = "many";
    const workers = [1, 2, 3].map((i) => startWorker({ ns, workerId: `many-${i}`, concurrency: 8, declare: i === 1 }));
    await waitLog(workers[0].log, "the tool to be declared", (e) => e.event === "ready" && e.worker === "many-1");
    await waitFor("3 workers polling", async () => {
      const polling = (await client.workers.list()).filter((w) => w.queues.includes(ns));
      return polling.length === 3;
    });
    const runs = await Promise.all(
      Array.from({ length: 30 }, (_, r) =>
        client.runs.create({
          input: "x",
          orchestration: "fixed",
          workflow: {
            name: `many-${r}`,
            steps: [
              {
                id: "all",
                kind: "parallel",
                input: { steps: Array.from({ length: 10 }, (_, i) => shout(`c${i}`, ns, { text: `r${r}c${i}` })) },
              },
            ],
            settings: { max_parallel_steps: 10 },
          },
        }),
      ),
    );
    for (const [r, run] of runs.entries()) {
      const done = await finished(run.id, 45_000);
      assert.equal(done.status, "succeeded", JSON.stringify(done));
      assert.deepEqual(done.output, Array.from({ length: 10 }, (_, i) => ({ text: `R${r}C${i}` })));
    }
    const tasks = await tasksOf(ns);
    assert.equal(tasks.length, 300);
    assert.equal(new Set(tasks.map((t) => t.idempotency_key)).size, 300);
    for (const task of tasks) {
      assert.equal(task.status, "completed", JSON.stringify(task));
      assert.equal(task.attempt, 1, JSON.stringify(task));
    }
    const done = readLog(workers[0].log).filter((e) => e.event === "done");
    assert.equal(done.length, 300, "300 function calls in all");
    assert.equal(new Set(done.map((e) => e.key)).size, 300, "each idempotency key once");
    const by = new Map();
    for (const e of done) by.set(e.worker, (by.get(e.worker) ?? 0) + 1);
    assert.equal(by.size, 3, `every process served tasks: ${JSON.stringify([...by])}`);
    for (const worker of workers) worker.kill("SIGTERM");
    for (const worker of workers) assert.equal((await exitOf(worker)).code, 0);
  });

  test("cancelling the run aborts the function's ctx.signal and the task ends cancelled", async () => {
    const ns = "cancel";
    const worker = startWorker({ ns, workerId: "cancel-1", concurrency: 1 });
    await waitLog(worker.log, "the worker to declare", (e) => e.event === "ready");
    const run = await client.runs.create({
      input: "x",
      orchestration: "fixed",
      workflow: { name: "cancelled", steps: [shout("only", ns, { text: "never", hang_attempts: 99 })] },
    });
    const started = await waitLog(worker.log, "the function to start", (e) => e.event === "start");
    await client.runs.cancel(run.id);
    const aborted = await waitLog(worker.log, "ctx.signal to abort", (e) => e.event === "aborted");
    assert.equal(aborted.reason, "TaskCancelledError");
    assert.equal(aborted.task, started.task);
    assert.equal((await finished(run.id)).status, "cancelled");
    assert.equal((await client.tasks.get(started.task)).status, "cancelled");
    // The slot is free again (concurrency 1): the same process serves the next call.
    const next = await client.runs.create({
      input: "x",
      orchestration: "fixed",
      workflow: { name: "after-cancel", steps: [shout("only", ns, { text: "next" })] },
    });
    const done = await finished(next.id);
    assert.equal(done.status, "succeeded");
    assert.deepEqual(done.output, { text: "NEXT" });
    assert.deepEqual(
      readLog(worker.log).filter((e) => e.event === "warn" || e.event === "error"),
      [],
      "nothing reported for the cancelled task",
    );
    worker.kill("SIGTERM");
    assert.equal((await exitOf(worker)).code, 0);
  });

  test("SIGTERM with a short grace hands the task back (worker_shutdown); another process completes it", async () => {
    const ns = "handback";
    const first = startWorker({ ns, workerId: "handback-1", grace: 200 });
    await waitLog(first.log, "the worker to declare", (e) => e.event === "ready");
    const run = await client.runs.create({
      input: "x",
      orchestration: "fixed",
      workflow: { name: "handed-back", steps: [shout("only", ns, { text: "back", hang_attempts: 1 })] },
    });
    const started = await waitLog(first.log, "the function to start", (e) => e.event === "start");
    first.kill("SIGTERM");
    assert.deepEqual(await exitOf(first), { code: 0, signal: null });
    const mine = readLog(first.log).filter((e) => e.worker === "handback-1");
    assert.deepEqual(
      mine.filter((e) => e.event !== "warn").map((e) => e.event),
      ["ready", "start", "aborted", "exit"],
    );
    assert.equal(mine.find((e) => e.event === "aborted").reason, "WorkerShutdownError");
    // Handed back: queued again for attempt 2 (not failed, not waiting for a lease to lapse).
    const back = await waitFor("the task to be queued again", async () => {
      const task = await client.tasks.get(started.task);
      return task.status !== "claimed" && task;
    });
    assert.equal(back.status, "queued", JSON.stringify(back));
    assert.equal(back.error?.code, "worker_shutdown", JSON.stringify(back));
    const second = startWorker({ ns, workerId: "handback-2" });
    const done = await finished(run.id);
    assert.equal(done.status, "succeeded", JSON.stringify(done));
    const task = await client.tasks.get(started.task);
    assert.equal(task.status, "completed");
    assert.equal(task.attempt, 2);
    assert.equal(task.worker_id, "handback-2");
    const again = readLog(first.log).find((e) => e.event === "done");
    assert.equal(again.key, started.key);
    assert.equal(again.attempt, 2);
    second.kill("SIGTERM");
    assert.equal((await exitOf(second)).code, 0);
  });

  test("SIGTERM with a long grace lets the task in flight complete before the process exits", async () => {
    const ns = "drain";
    const worker = startWorker({ ns, workerId: "drain-1", grace: 30_000 });
    await waitLog(worker.log, "the worker to declare", (e) => e.event === "ready");
    const run = await client.runs.create({
      input: "x",
      orchestration: "fixed",
      workflow: { name: "drained", steps: [shout("only", ns, { text: "finish", ms: 1500 })] },
    });
    const started = await waitLog(worker.log, "the function to start", (e) => e.event === "start");
    worker.kill("SIGTERM");
    assert.deepEqual(await exitOf(worker), { code: 0, signal: null });
    assert.deepEqual(
      readLog(worker.log).map((e) => e.event),
      ["ready", "start", "done", "exit"],
    );
    const task = await client.tasks.get(started.task);
    assert.equal(task.status, "completed", JSON.stringify(task));
    assert.equal(task.attempt, 1);
    assert.equal(task.worker_id, "drain-1");
    const done = await finished(run.id);
    assert.equal(done.status, "succeeded");
    assert.deepEqual(done.output, { text: "FINISH" });
  });

  test("a thrown error fails the attempt: retried when retryable, the step fails with a NonRetryableError's or TaskFailure's code", async () => {
    const ns = "throws";
    const worker = startWorker({ ns, workerId: "throws-1" });
    await waitLog(worker.log, "the worker to declare", (e) => e.event === "ready");
    const create = (name, args) =>
      client.runs.create({ input: "x", orchestration: "fixed", workflow: { name, steps: [shout("only", ns, args)] } });
    const flaky = await create("flaky", { text: "flaky", throw_attempts: 1, throw_kind: "plain", progress: { half: true } });
    const final = await create("final", { text: "final", throw_attempts: 1, throw_kind: "final" });
    const custom = await create("custom", { text: "custom", throw_attempts: 1, throw_kind: "custom" });

    const flakyDone = await finished(flaky.id);
    assert.equal(flakyDone.status, "succeeded", JSON.stringify(flakyDone));
    assert.deepEqual(flakyDone.output, { text: "FLAKY" });
    const [flakyTask] = await tasksOf(ns).then((tasks) => tasks.filter((t) => t.run_id === flaky.id));
    assert.equal(flakyTask.attempt, 2);
    assert.equal(flakyTask.status, "completed");
    assert.deepEqual(flakyTask.progress, { half: true }, "ctx.heartbeat(progress) reached the task");

    for (const [run, code, message] of [
      [final, "worker_error", "no way: final"],
      [custom, "card_declined", "declined: custom"],
    ]) {
      const done = await finished(run.id);
      assert.equal(done.status, "failed", JSON.stringify(done));
      const [task] = await tasksOf(ns).then((tasks) => tasks.filter((t) => t.run_id === run.id));
      assert.equal(task.status, "failed");
      assert.equal(task.attempt, 1, "not retried");
      assert.deepEqual(task.error, { code, message });
      assert.match(JSON.stringify(done.error), new RegExp(code));
    }
    worker.kill("SIGTERM");
    assert.equal((await exitOf(worker)).code, 0);
  });

  test("a worker paused past its lease loses the claim: ctx.signal aborts (TaskLostError), it reports nothing", async () => {
    const ns = "paused";
    // Concurrency 1: no poll of its own stays open while it is stopped (one would claim the re-offer).
    const first = startWorker({ ns, workerId: "paused-1", concurrency: 1 });
    await waitLog(first.log, "the worker to declare", (e) => e.event === "ready");
    const run = await client.runs.create({
      input: "x",
      orchestration: "fixed",
      workflow: { name: "paused", steps: [shout("only", ns, { text: "late", hang_attempts: 1 })] },
    });
    const started = await waitLog(first.log, "the function to start", (e) => e.event === "start");
    first.kill("SIGSTOP");
    const second = startWorker({ ns, workerId: "paused-2" });
    try {
      const done = await finished(run.id);
      assert.equal(done.status, "succeeded", JSON.stringify(done));
    } finally {
      first.kill("SIGCONT");
    }
    const aborted = await waitLog(first.log, "the paused function's signal to abort", (e) => e.event === "aborted");
    assert.equal(aborted.worker, "paused-1");
    assert.equal(aborted.reason, "TaskLostError");
    const task = await client.tasks.get(started.task);
    assert.equal(task.status, "completed");
    assert.equal(task.worker_id, "paused-2");
    assert.equal(task.attempt, 2, JSON.stringify(readLog(first.log), null, 1));
    assert.deepEqual(task.output, { text: "LATE" });
    // The first worker goes on serving.
    const next = await client.runs.create({
      input: "x",
      orchestration: "fixed",
      workflow: { name: "paused-next", steps: [shout("only", ns, { text: "next" })] },
    });
    second.kill("SIGTERM");
    assert.equal((await exitOf(second)).code, 0);
    assert.deepEqual((await finished(next.id)).output, { text: "NEXT" });
    first.kill("SIGTERM");
    assert.equal((await exitOf(first)).code, 0);
  });

  test("an output the server refuses (over its body limit) fails the task at once, not retried", async () => {
    const ns = "huge";
    const worker = startWorker({ ns, workerId: "huge-1", heartbeatMs: 500 });
    await waitLog(worker.log, "the worker to declare", (e) => e.event === "ready");
    const run = await client.runs.create({
      input: "x",
      orchestration: "fixed",
      workflow: { name: "huge", steps: [shout("only", ns, { text: "x", big: 1_200_000 })] },
    });
    const done = await finished(run.id);
    assert.equal(done.status, "failed", JSON.stringify(done));
    const [task] = await tasksOf(ns);
    assert.equal(task.status, "failed");
    assert.equal(task.attempt, 1, "not offered again: the same output would be refused again");
    assert.equal(task.error.code, "output_too_large", JSON.stringify(task.error));
    assert.equal(readLog(worker.log).filter((e) => e.event === "done").length, 1, "the function ran once");
    worker.kill("SIGTERM");
    assert.equal((await exitOf(worker)).code, 0);
  });

  test("SIGTERM while orca is unreachable: the worker gives up its reports after the grace and exits", async () => {
    const ns = "gone";
    const worker = startWorker({ ns, workerId: "gone-1", grace: 200 });
    await waitLog(worker.log, "the worker to declare", (e) => e.event === "ready");
    const run = await client.runs.create({
      input: "x",
      orchestration: "fixed",
      workflow: { name: "gone", steps: [shout("only", ns, { text: "x", hang_attempts: 1 })] },
    });
    const started = await waitLog(worker.log, "the function to start", (e) => e.event === "start");
    await orca.kill();
    try {
      worker.kill("SIGTERM");
      assert.deepEqual(await exitOf(worker, 15_000), { code: 0, signal: null });
      const mine = readLog(worker.log);
      assert.equal(mine.find((e) => e.event === "aborted")?.reason, "WorkerShutdownError");
      assert.ok(mine.some((e) => e.event === "error" && e.message.includes(started.task)), "the dropped hand-back is logged");
    } finally {
      await orca.start();
    }
    // The claim lapses and the task is offered again; nobody serves it: cancel the run.
    await client.runs.cancel(run.id);
    assert.equal((await finished(run.id)).status, "cancelled");
  });
});
