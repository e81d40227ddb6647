/**
 * Workers: your own functions serving orca's worker tools. Register functions as tools of one
 * queue, then `await worker.run()`: it long-polls for tasks (never more than `concurrency` in
 * flight), runs each function with the task's arguments and a {@link TaskContext}, heartbeats
 * automatically, completes with the return value or fails with the error's message, and on
 * `stop()` (or SIGTERM/SIGINT) stops polling, waits up to `grace` for the tasks in flight and
 * hands the rest back (failed retryable, code `worker_shutdown`).
 *
 * ```ts
 * import { Client } from "@orca/client";
 * import { Worker } from "@orca/client/worker";
 * const worker = new Worker(new Client(), { queue: "demo" });
 * worker.tool({ name: "demo.slugify", inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] } },
 *   async ({ text }) => ({ slug: text.toLowerCase().replace(/[^a-z0-9]+/g, "-") }));
 * await worker.declare();
 * await worker.run();
 * ```
 *
 * Needs `fetch` (Node 18+); a worker in a browser is not a goal.
 */
import type { Client } from "./client.js";
import { APIConnectionError, APIError, ConflictError, NotFoundError, OrcaError } from "./errors.js";
import type { TaskInfo } from "./resources/task-types.js";
import { sleep, uuid } from "./transport.js";

/** A tool's function: the task's arguments and its context; returns the output (any JSON). */
export type ToolFunction<Args = any, Output = unknown> = (args: Args, ctx: TaskContext) => Output | Promise<Output>;

/** A registered tool: its declaration (what `declare()` PUTs) and its function. */
export interface ToolOptions {
  /** Dotted lowercase, e.g. `billing.charge`. */
  name: string;
  description?: string;
  /** JSON Schema (an object schema) of the arguments; the server checks a call against it before queueing. */
  inputSchema?: Record<string, unknown>;
  /** A task no worker took within this fails with `tool_timeout` (server default 300000). */
  scheduleToStartMs?: number;
  /** One claim may run this long (server default 300000). */
  startToCloseMs?: number;
  /** When set, a claim not heartbeated for this long lapses and the task is offered again. */
  heartbeatMs?: number | null;
  /** How often a task is offered and the backoff between offers (server defaults 3, 1000, 60000). */
  retry?: { maxAttempts?: number; backoffMs?: number; maxBackoffMs?: number };
}

/** Where the worker reports what happens (a failed call, a dropped completion). Default: console. */
export interface WorkerLogger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export interface WorkerOptions {
  /** The queue to poll; every tool registered here belongs to it. */
  queue: string;
  /** `[A-Za-z0-9_.:-]{1,128}`. Default: `worker-<pid>-<random>`. */
  workerId?: string;
  /** Tasks in flight at most; each poll asks for `concurrency - in flight`. Default 4. */
  concurrency?: number;
  /** How long one poll waits for a task (0..30000 ms). Default 30000. */
  waitMs?: number;
  /** On shutdown, how long in-flight tasks may take before they are handed back (ms). Default 30000. */
  grace?: number;
  /** Heartbeat interval for a task without `heartbeat_ms` (to hear of a cancel), ms. Default 10000. */
  idleHeartbeatMs?: number;
  /** Longest pause between retries of a failed call (poll, heartbeat, completion), ms. Default 5000. */
  maxBackoffMs?: number;
  /** `run()` stops gracefully on SIGTERM and SIGINT (when there is a `process`). Default true. */
  handleSignals?: boolean;
  logger?: WorkerLogger;
}

/** Throw it (or a subclass) from a tool to fail the task with your code and say whether to retry. */
export class TaskFailure extends OrcaError {
  /** snake_case, e.g. `card_declined`. */
  readonly code: string;
  readonly retryable: boolean;
  constructor(code: string, message: string, options: { retryable?: boolean; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.code = code;
    this.retryable = options.retryable ?? true;
  }
}

/** Fails the task without a retry (code `worker_error` unless given). */
export class NonRetryableError extends TaskFailure {
  constructor(message: string, options: { code?: string; cause?: unknown } = {}) {
    super(options.code ?? "worker_error", message, { retryable: false, cause: options.cause });
  }
}

/** The reason of `ctx.signal` when the run (or the task) was cancelled: the server said `task_cancelled`. */
export class TaskCancelledError extends OrcaError {}
/** The reason of `ctx.signal` when the claim is no longer this worker's (`lease_expired`, `not_yours`, `task_finished`, 404). */
export class TaskLostError extends OrcaError {}
/** The reason of `ctx.signal` when the worker shut down past its grace period; the task was handed back. */
export class WorkerShutdownError extends OrcaError {}

/** What a tool's function gets besides its arguments. */
export class TaskContext {
  /** Aborted when the run is cancelled, the claim is lost, or the worker shuts down past its grace. */
  readonly signal: AbortSignal;
  /** @internal */
  readonly controller = new AbortController();

  constructor(
    /** The task as the poll returned it. */
    readonly task: TaskInfo,
    private readonly beat: (progress: unknown) => Promise<void>,
  ) {
    this.signal = this.controller.signal;
  }

  get taskId(): string {
    return this.task.id;
  }
  /** Stable across re-offers of this call: key your side effects on it. */
  get idempotencyKey(): string {
    return this.task.idempotency_key;
  }
  /** 1-based: this claim's number (2 = the second time the task is offered). */
  get attempt(): number {
    return this.task.attempt;
  }
  get runId(): string {
    return this.task.run_id;
  }
  get tool(): string {
    return this.task.tool;
  }
  /** True once `signal` is aborted. */
  get cancelled(): boolean {
    return this.signal.aborted;
  }

  /**
   * Heartbeats now, with `progress` (any JSON) streamed to the run's clients. Never throws for
   * a refusal: when the server says the task was cancelled or is no longer yours, `signal` aborts.
   */
  heartbeat(progress?: unknown): Promise<void> {
    return this.beat(progress);
  }
}

interface Registered {
  options: ToolOptions;
  fn: ToolFunction;
}

interface Running {
  ctx: TaskContext;
  /** Set once the outcome must not be reported (cancelled, lost, handed back). */
  settled: boolean;
  done: Promise<void>;
}

const consoleLogger: WorkerLogger = {
  info: (m) => console.info(m),
  warn: (m) => console.warn(m),
  error: (m) => console.error(m),
};

export class Worker {
  readonly queue: string;
  readonly workerId: string;
  readonly concurrency: number;
  readonly waitMs: number;
  readonly grace: number;
  private readonly idleHeartbeatMs: number;
  private readonly maxBackoffMs: number;
  private readonly handleSignals: boolean;
  private readonly log: WorkerLogger;
  private readonly tools = new Map<string, Registered>();
  private readonly running = new Map<string, Running>();
  private stopping = false;
  /** When stopping: past this time (the grace, then {@link REPORT_AFTER_GRACE_MS}) reports are given up. */
  private stopDeadline = Infinity;
  private readonly stopController = new AbortController();
  private slotFreed: (() => void) | undefined;
  private runPromise: Promise<void> | undefined;

  constructor(
    readonly client: Client,
    options: WorkerOptions,
  ) {
    this.queue = options.queue;
    this.workerId = options.workerId ?? defaultWorkerId();
    this.concurrency = Math.max(1, Math.floor(options.concurrency ?? 4));
    this.waitMs = Math.min(30_000, Math.max(0, options.waitMs ?? 30_000));
    this.grace = options.grace ?? 30_000;
    this.idleHeartbeatMs = options.idleHeartbeatMs ?? 10_000;
    this.maxBackoffMs = options.maxBackoffMs ?? 5_000;
    this.handleSignals = options.handleSignals ?? true;
    const prefix = `[orca worker ${this.workerId}] `;
    const base = options.logger ?? consoleLogger;
    this.log = {
      info: (m) => base.info(prefix + m),
      warn: (m) => base.warn(prefix + m),
      error: (m) => base.error(prefix + m),
    };
  }

  /** Registers `fn` as the tool `options.name` of this worker's queue. Returns the worker. */
  tool<Args = any, Output = unknown>(options: ToolOptions, fn: ToolFunction<Args, Output>): this {
    if (this.tools.has(options.name)) throw new OrcaError(`tool ${options.name} is already registered`);
    this.tools.set(options.name, { options, fn: fn as ToolFunction });
    return this;
  }

  /** The names of the registered tools. */
  get toolNames(): string[] {
    return [...this.tools.keys()];
  }

  /** How many tasks are in flight now. */
  get inFlight(): number {
    return this.running.size;
  }

  /** The declaration `declare()` PUTs for a registered tool (the server's WorkerTool shape). */
  declaration(name: string): Record<string, unknown> {
    const tool = this.tools.get(name);
    if (!tool) throw new OrcaError(`no tool ${name} registered`);
    const o = tool.options;
    const retry =
      o.retry &&
      dropUndefined({ max_attempts: o.retry.maxAttempts, backoff_ms: o.retry.backoffMs, max_backoff_ms: o.retry.maxBackoffMs });
    return dropUndefined({
      name: o.name,
      description: o.description,
      queue: this.queue,
      input_schema: o.inputSchema,
      schedule_to_start_ms: o.scheduleToStartMs,
      start_to_close_ms: o.startToCloseMs,
      heartbeat_ms: o.heartbeatMs,
      retry,
    });
  }

  /** PUTs every registered tool as a worker tool of this queue (`PUT /v1/tools/{name}`). */
  async declare(): Promise<void> {
    for (const name of this.tools.keys()) await this.client.tools.put(name, this.declaration(name) as never);
  }

  /**
   * Polls and runs tasks until `stop()` (or SIGTERM/SIGINT), then shuts down gracefully.
   * Resolves once every task is finished or handed back; rejects when the server refuses the
   * poll itself (a bad key, a bad queue name: a 4xx other than 408/429).
   */
  run(): Promise<void> {
    if (this.runPromise) throw new OrcaError("this worker is already running");
    if (this.tools.size === 0) throw new OrcaError("register a tool before run()");
    this.runPromise = this.loop();
    return this.runPromise;
  }

  /**
   * Stops polling; tasks in flight get `grace` ms to finish, then are handed back. Resolves when
   * `run()` has ended.
   */
  async stop(): Promise<void> {
    if (!this.stopping) {
      this.beginStopping();
      this.stopController.abort(new WorkerShutdownError("worker stopping"));
      this.slotFreed?.();
    }
    await this.runPromise?.catch(() => undefined);
  }

  private beginStopping(): void {
    if (this.stopping) return;
    this.stopping = true;
    this.stopDeadline = Date.now() + this.grace + REPORT_AFTER_GRACE_MS;
  }

  private async loop(): Promise<void> {
    const proc = (globalThis as { process?: NodeLikeProcess }).process;
    const onSignal = (signal: string) => {
      this.log.info(`${signal}: stopping (grace ${this.grace} ms)`);
      void this.stop();
    };
    const signals = this.handleSignals && typeof proc?.on === "function" ? ["SIGTERM", "SIGINT"] : [];
    for (const s of signals) proc!.on(s, onSignal);
    let fatal: unknown;
    try {
      await this.pollLoop();
    } catch (error) {
      fatal = error;
    } finally {
      await this.shutdown();
      for (const s of signals) proc!.off(s, onSignal);
    }
    if (fatal !== undefined) throw fatal;
  }

  private async pollLoop(): Promise<void> {
    let failures = 0;
    while (!this.stopping) {
      if (this.running.size >= this.concurrency) {
        await new Promise<void>((resolve) => (this.slotFreed = resolve));
        this.slotFreed = undefined;
        continue;
      }
      let tasks: TaskInfo[];
      try {
        const answer = await this.client.tasks.poll(
          {
            worker_id: this.workerId,
            queue: this.queue,
            tools: this.toolNames,
            max_tasks: Math.min(32, this.concurrency - this.running.size),
            wait_ms: this.waitMs,
          },
          { signal: this.stopController.signal, maxRetries: 0 },
        );
        tasks = answer.tasks;
        failures = 0;
      } catch (error) {
        if (this.stopping) return;
        if (!transient(error)) {
          this.log.error(`poll refused: ${describe(error)}`);
          throw error;
        }
        const wait = this.backoff(failures++);
        this.log.warn(`poll failed (${describe(error)}); again in ${wait} ms`);
        await sleep(wait, this.stopController.signal).catch(() => undefined);
        continue;
      }
      for (const task of tasks) this.start(task);
    }
  }

  /** Runs one claimed task in the background. */
  private start(task: TaskInfo): void {
    let heartbeatChain: Promise<void> = Promise.resolve();
    const entry: Running = { ctx: undefined as never, settled: false, done: Promise.resolve() };
    const beat = (progress: unknown): Promise<void> => {
      // One heartbeat at a time per task, in order.
      heartbeatChain = heartbeatChain.then(() => this.heartbeat(entry, progress));
      return heartbeatChain;
    };
    entry.ctx = new TaskContext(task, beat);
    this.running.set(task.id, entry);
    entry.done = this.execute(entry).finally(() => {
      this.running.delete(task.id);
      this.slotFreed?.();
    });
  }

  private async execute(entry: Running): Promise<void> {
    const { ctx } = entry;
    const task = ctx.task;
    if (this.stopping) {
      // Claimed by a poll answered while stopping: hand it back at once.
      entry.settled = true;
      await this.report(task, "fail", { error: { code: "worker_shutdown", message: "the worker is shutting down" }, retryable: true });
      return;
    }
    const tool = this.tools.get(task.tool);
    if (!tool) {
      entry.settled = true;
      await this.report(task, "fail", {
        error: { code: "tool_not_found", message: `this worker has no tool ${task.tool}` },
        retryable: false,
      });
      return;
    }
    const stopBeats = new AbortController();
    const beats = this.autoHeartbeat(entry, stopBeats.signal);
    let output: unknown;
    let failure: { code: string; message: string; retryable: boolean } | undefined;
    try {
      output = await tool.fn(task.arguments ?? {}, ctx);
    } catch (error) {
      failure = failureOf(error);
    } finally {
      stopBeats.abort();
      await beats;
    }
    if (entry.settled) {
      if (ctx.signal.reason instanceof TaskCancelledError) this.log.info(`task ${task.id} (${task.tool}) was cancelled`);
      return;
    }
    entry.settled = true;
    if (failure) {
      await this.report(task, "fail", { error: { code: failure.code, message: failure.message }, retryable: failure.retryable });
      return;
    }
    let json: unknown;
    try {
      json = output === undefined ? null : JSON.parse(JSON.stringify(output));
    } catch (error) {
      await this.report(task, "fail", {
        error: { code: "worker_error", message: `the output is not JSON: ${describe(error)}` },
        retryable: false,
      });
      return;
    }
    await this.report(task, "complete", { output: json });
  }

  /** Heartbeats every heartbeat_ms/3 (or `idleHeartbeatMs`) until the function settles. */
  private async autoHeartbeat(entry: Running, stop: AbortSignal): Promise<void> {
    const task = entry.ctx.task;
    const every = task.heartbeat_ms ? Math.max(50, Math.floor(task.heartbeat_ms / 3)) : this.idleHeartbeatMs;
    while (!stop.aborted && !entry.settled) {
      try {
        await sleep(every, stop);
      } catch {
        return;
      }
      await entry.ctx.heartbeat();
    }
  }

  /** One heartbeat; a refusal aborts the context's signal; a connection error is logged. */
  private async heartbeat(entry: Running, progress: unknown): Promise<void> {
    if (entry.settled) return;
    const task = entry.ctx.task;
    try {
      const body: { worker_id: string; progress?: unknown } = { worker_id: this.workerId };
      if (progress !== undefined) body.progress = progress;
      await this.client.tasks.heartbeat(task.id, body, { maxRetries: 0 });
    } catch (error) {
      if (transient(error)) {
        this.log.warn(`heartbeat of task ${task.id} failed: ${describe(error)}`);
        return;
      }
      const reason = reasonOf(error);
      if (entry.settled) return;
      entry.settled = true;
      if (reason === "task_cancelled") {
        entry.ctx.controller.abort(new TaskCancelledError(`task ${task.id} was cancelled`));
      } else {
        this.log.warn(`task ${task.id} is no longer this worker's: ${describe(error)}`);
        entry.ctx.controller.abort(new TaskLostError(`task ${task.id}: ${reason ?? describe(error)}`));
      }
    }
  }

  /**
   * Completes or fails a task, retrying connection errors and 429/5xx until an answer (or, when
   * shutting down, until the grace is long past). A 409 is logged and dropped. A completion
   * refused for its output (413 over the server's body limit, 400/422) fails the task instead,
   * not retryable: the same output would be refused on every attempt.
   */
  private async report(task: TaskInfo, kind: "complete" | "fail", body: Record<string, unknown>): Promise<void> {
    const full = { worker_id: this.workerId, ...body } as never;
    for (let attempt = 0; ; attempt++) {
      try {
        if (kind === "complete") await this.client.tasks.complete(task.id, full, { maxRetries: 0 });
        else await this.client.tasks.fail(task.id, full, { maxRetries: 0 });
        return;
      } catch (error) {
        if (error instanceof ConflictError) {
          this.log.warn(`${kind} of task ${task.id} refused (${reasonOf(error) ?? error.code}); dropped`);
          return;
        }
        if (!transient(error)) {
          if (kind === "complete" && error instanceof APIError && [400, 413, 422].includes(error.status)) {
            const code = error.status === 413 ? "output_too_large" : "output_rejected";
            this.log.error(`completion of task ${task.id} refused (${describe(error)}); failing it with ${code}`);
            await this.report(task, "fail", {
              error: { code, message: `the server refused the output: ${describe(error)}`.slice(0, 4000) },
              retryable: false,
            });
            return;
          }
          this.log.error(`${kind} of task ${task.id} refused: ${describe(error)}; dropped`);
          return;
        }
        const wait = this.backoff(attempt);
        if (this.stopping && Date.now() + wait > this.stopDeadline) {
          this.log.error(`${kind} of task ${task.id} failed (${describe(error)}); given up: the worker is stopping`);
          return;
        }
        this.log.warn(`${kind} of task ${task.id} failed (${describe(error)}); again in ${wait} ms`);
        await sleep(wait);
      }
    }
  }

  /** After the poll loop: wait up to `grace` for tasks in flight, then hand back the rest. */
  private async shutdown(): Promise<void> {
    this.beginStopping();
    const pending = [...this.running.values()];
    if (pending.length === 0) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const graceOver = new Promise<"grace">((resolve) => (timer = setTimeout(() => resolve("grace"), this.grace)));
    const all = Promise.all(pending.map((r) => r.done)).then(() => "done" as const);
    const first = await Promise.race([all, graceOver]);
    clearTimeout(timer);
    if (first === "done") return;
    const left = [...this.running.values()].filter((r) => !r.settled);
    await Promise.all(
      left.map(async (entry) => {
        entry.settled = true;
        entry.ctx.controller.abort(new WorkerShutdownError("the worker shut down; the task was handed back"));
        this.log.warn(`handing back task ${entry.ctx.task.id} (${entry.ctx.task.tool})`);
        await this.report(entry.ctx.task, "fail", {
          error: { code: "worker_shutdown", message: "the worker shut down before the task finished" },
          retryable: true,
        });
      }),
    );
    // Reports in progress for tasks that did finish (a completion being retried) are awaited too,
    // for a second at most (a timer cleared after, so that it does not hold the process open).
    const pause = new AbortController();
    await Promise.race([
      Promise.all([...this.running.values()].map((r) => r.done)),
      sleep(1_000, pause.signal).catch(() => undefined),
    ]);
    pause.abort();
  }

  private backoff(attempt: number): number {
    const ceiling = Math.min(this.maxBackoffMs, 250 * 2 ** Math.min(attempt, 10));
    return Math.round(ceiling * (0.5 + Math.random() / 2));
  }
}

/** How long past the grace a stopping worker keeps retrying a completion or hand-back the server did not answer. */
const REPORT_AFTER_GRACE_MS = 5_000;

interface NodeLikeProcess {
  on(event: string, listener: (signal: string) => void): unknown;
  off(event: string, listener: (signal: string) => void): unknown;
  pid?: number;
}

function defaultWorkerId(): string {
  const pid = (globalThis as { process?: NodeLikeProcess }).process?.pid;
  return `worker-${pid ?? "x"}-${uuid().slice(0, 8)}`;
}

/** Worth retrying: no answer, or 408/429/5xx. */
function transient(error: unknown): boolean {
  if (error instanceof APIConnectionError) return true;
  if (error instanceof APIError) return error.status === 408 || error.status === 429 || error.status >= 500;
  return false;
}

/** The `reason` of a 409 refusal (task_cancelled, lease_expired, not_yours, task_finished); `not_found` for a 404. */
function reasonOf(error: unknown): string | undefined {
  if (error instanceof NotFoundError) return "not_found";
  if (error instanceof APIError) {
    const reason = error.problem?.["reason"];
    return typeof reason === "string" ? reason : undefined;
  }
  return undefined;
}

/** An error as a task failure: the message only (never a stack), the code and retry from a TaskFailure. */
function failureOf(error: unknown): { code: string; message: string; retryable: boolean } {
  const message = (error instanceof Error ? error.message : String(error)).slice(0, 4000) || "error";
  if (error instanceof TaskFailure) return { code: error.code, message, retryable: error.retryable };
  return { code: "worker_error", message, retryable: true };
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function dropUndefined<T extends Record<string, unknown>>(object: T): Record<string, unknown> {
  return Object.fromEntries(Object.entries(object).filter(([, v]) => v !== undefined));
}
