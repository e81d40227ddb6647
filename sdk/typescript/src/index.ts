/**
 * @orca/client — a typed client for orca's HTTP API (runs, streaming with reconnect, registries,
 * schedules, sessions...). Runs wherever `fetch` streams: Node 18+, browsers, Deno, Bun.
 */
export { Client, DEFAULT_BASE_URL, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_MS, type ClientOptions } from "./client.js";
export * from "./errors.js";
export { OPERATION_METHODS, OPERATIONS_NOT_WRAPPED } from "./operations.js";
export { Paginator } from "./pagination.js";
export { RunStream, type InputHandler, type StreamOptions } from "./stream.js";
export type { FetchLike, RequestOptions } from "./transport.js";
export type { IdempotentOptions, RunListParams } from "./resources/runs.js";
export type { PutOptions, Registry, Versions, Labels } from "./resources/registry.js";
export type * from "./types.js";
export { Tasks, Workers } from "./resources/tasks.js";
export type {
  TaskInfo,
  TaskListParams,
  TaskPollRequest,
  TaskPollResponse,
  WorkerInfo,
} from "./resources/task-types.js";
export {
  Worker,
  TaskContext,
  TaskFailure,
  NonRetryableError,
  TaskCancelledError,
  TaskLostError,
  WorkerShutdownError,
  type ToolFunction,
  type ToolOptions,
  type WorkerLogger,
  type WorkerOptions,
} from "./worker.js";
