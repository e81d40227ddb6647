/**
 * Worker tools' tasks and the workers that serve them: `client.tasks` (list, get, and the worker
 * protocol's poll, heartbeat, complete, fail) and `client.workers` (who polled recently).
 * The {@link Worker} class (`@orca/client/worker`) drives these for you.
 */
import { Paginator } from "../pagination.js";
import type { RequestOptions, Transport } from "../transport.js";
import type { TaskInfo, TaskList, TaskListParams, TaskPollRequest, TaskPollResponse, WorkerInfo } from "./task-types.js";
import { path } from "./path.js";

export type * from "./task-types.js";

export class Tasks {
  constructor(private readonly transport: Transport) {}

  /** The tenant's tasks, newest first, fetched page by page as iterated (`limit` is the page size). */
  list(params: TaskListParams = {}, options?: RequestOptions): Paginator<TaskInfo> {
    return new Paginator(async (cursor) => {
      const page = await this.transport.json<TaskList>(
        { method: "GET", path: "/v1/tasks", query: { ...params, cursor } },
        options,
      );
      return { items: page.tasks, nextCursor: page.next_cursor };
    });
  }

  /** One task. */
  get(id: string, options?: RequestOptions): Promise<TaskInfo> {
    return this.transport.json({ method: "GET", path: path`/v1/tasks/${id}` }, options);
  }

  /**
   * `POST /v1/workers/poll`: long-polls for up to `max_tasks` tasks of a queue; each one returned
   * is claimed by `worker_id` under a lease. Empty after `wait_ms` with nothing to do. Not
   * retried (a lost answer's tasks come back after their lease); the timeout defaults to
   * `wait_ms` + 15 s.
   */
  poll(body: TaskPollRequest, options?: RequestOptions): Promise<TaskPollResponse> {
    const timeout = options?.timeout ?? (body.wait_ms ?? 30_000) + 15_000;
    return this.transport.json({ method: "POST", path: "/v1/workers/poll", body }, { ...options, timeout });
  }

  /**
   * Extends the claim's lease, passing `progress` (any JSON) on to the run's clients. A 409
   * {@link ConflictError} whose `problem.reason` is `task_cancelled` says: stop working.
   */
  heartbeat(id: string, body: { worker_id: string; progress?: unknown }, options?: RequestOptions): Promise<{ lease_expires_at: string }> {
    return this.transport.json({ method: "POST", path: path`/v1/tasks/${id}/heartbeat`, body }, options);
  }

  /** Completes the claim with its output (accepted once; anything later is 409). */
  complete(id: string, body: { worker_id: string; output: unknown }, options?: RequestOptions): Promise<TaskInfo> {
    return this.transport.json({ method: "POST", path: path`/v1/tasks/${id}/complete`, body }, options);
  }

  /** Fails the claim: queued again while attempts remain when `retryable` (the default), else failed. */
  fail(
    id: string,
    body: { worker_id: string; error: { code: string; message: string }; retryable?: boolean },
    options?: RequestOptions,
  ): Promise<TaskInfo> {
    return this.transport.json({ method: "POST", path: path`/v1/tasks/${id}/fail`, body }, options);
  }
}

export class Workers {
  constructor(private readonly transport: Transport) {}

  /** The workers that polled in the last 5 minutes: their queues, tools and tasks in flight. */
  async list(options?: RequestOptions): Promise<WorkerInfo[]> {
    const page = await this.transport.json<{ workers: WorkerInfo[] }>({ method: "GET", path: "/v1/workers" }, options);
    return page.workers;
  }
}
