/**
 * The worker protocol's shapes (protocol of issue 47). Written by hand until openapi.yaml
 * describes them; they follow the server's documents field for field.
 */

/** A task's state: `queued → claimed → completed | failed | cancelled`. */
export type TaskStatus = "queued" | "claimed" | "completed" | "failed" | "cancelled";

/** One call of a worker tool, as poll returns it and `GET /v1/tasks/{id}` shows it. */
export interface TaskInfo {
  id: string;
  tool: string;
  queue: string;
  arguments: Record<string, unknown>;
  /** Stable across re-offers of the same call: key your own side effects on it. */
  idempotency_key: string;
  status: TaskStatus;
  /** 1-based: how many times the task has been claimed, this claim included. */
  attempt: number;
  max_attempts: number;
  run_id: string;
  step_id: string;
  path: string | null;
  call_id: string;
  worker_id: string | null;
  heartbeat_ms: number | null;
  start_to_close_ms: number;
  lease_expires_at: string | null;
  progress: unknown;
  output: unknown;
  error: { code: string; message: string } | null;
  created_at: string;
  claimed_at: string | null;
  finished_at: string | null;
}

/** `GET /v1/tasks` filters (`limit` ≤ 200, default 50). */
export interface TaskListParams {
  status?: TaskStatus;
  queue?: string;
  tool?: string;
  run_id?: string;
  limit?: number;
}

export interface TaskList {
  tasks: TaskInfo[];
  next_cursor: string | null;
}

/** `POST /v1/workers/poll`. */
export interface TaskPollRequest {
  worker_id: string;
  queue: string;
  /** Only these tools of the queue (absent or empty: any). */
  tools?: string[];
  /** 1..=32, default 1. */
  max_tasks?: number;
  /** 0..=30000, default 30000. */
  wait_ms?: number;
}

export interface TaskPollResponse {
  tasks: TaskInfo[];
}

/** A worker that polled in the last 5 minutes. */
export interface WorkerInfo {
  worker_id: string;
  queues: string[];
  tools: string[];
  last_poll_at: string;
  in_flight: number;
}
