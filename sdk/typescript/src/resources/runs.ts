/** `client.runs`: create, read, list, act on and stream runs. */
import { Paginator } from "../pagination.js";
import { RunStream, type StreamOptions } from "../stream.js";
import { uuid, type Query, type RequestOptions, type Transport } from "../transport.js";
import type {
  Checkpoint,
  Event,
  ForkBody,
  InputAnswer,
  PlanRecord,
  QueryOf,
  ReplanRequest,
  Run,
  RunDetail,
  RunList,
  RunRequest,
  StepView,
  Timeline,
  WebhookDelivery,
} from "../types.js";
import { path } from "./path.js";

/** Options of a call that may carry an `Idempotency-Key` (one is generated when absent). */
export interface IdempotentOptions extends RequestOptions {
  /** The same key returns the first run instead of a new one; retries always resend it. */
  idempotencyKey?: string;
}

/** Filters of `runs.list`: the query of `GET /v1/runs`, plus `metadata` (each `metadata.KEY=VALUE`). */
export type RunListParams = QueryOf<"list_runs"> & {
  metadata?: Record<string, string | number | boolean>;
};

export class Runs {
  constructor(private readonly transport: Transport) {}

  /** Creates a run in the background (201; 200 for a repeated Idempotency-Key). */
  create(body: RunRequest, options?: IdempotentOptions): Promise<Run> {
    return this.transport.json(
      { method: "POST", path: "/v1/runs", body, headers: idempotency(options), retryable: true },
      options,
    );
  }

  /** The run, with its step counts and selection. */
  get(id: string, options?: RequestOptions): Promise<RunDetail> {
    return this.transport.json({ method: "GET", path: path`/v1/runs/${id}` }, options);
  }

  /**
   * Every run matching the filters, newest first, fetched page by page as iterated
   * (`limit` is the page size; the filters are sent with every page).
   */
  list(params: RunListParams = {}, options?: RequestOptions): Paginator<Run> {
    const { metadata, ...filters } = params;
    const query: Query = { ...filters };
    for (const [key, value] of Object.entries(metadata ?? {})) query[`metadata.${key}`] = value;
    return new Paginator(async (cursor) => {
      const page = await this.transport.json<RunList>(
        { method: "GET", path: "/v1/runs", query: { ...query, cursor } },
        options,
      );
      return { items: page.runs, nextCursor: page.next_cursor };
    });
  }

  /** Deletes a finished run and its history (409 while it is active). */
  async delete(id: string, options?: RequestOptions): Promise<void> {
    await this.transport.json({ method: "DELETE", path: path`/v1/runs/${id}` }, options);
  }

  /** Cancels the run (202; 409 once it has ended). */
  cancel(id: string, options?: RequestOptions): Promise<Run> {
    return this.action(id, "cancel", undefined, options);
  }

  /** Answers the run's `input_required` for `step_id`. */
  input(id: string, answer: InputAnswer, options?: RequestOptions): Promise<Run> {
    return this.action(id, "input", answer, options);
  }

  /** Asks the planner for a new plan (or restores an earlier plan version). */
  replan(id: string, body: ReplanRequest = {}, options?: RequestOptions): Promise<Run> {
    return this.action(id, "replan", body, options);
  }

  /** Pauses the run at its next step boundary. */
  pause(id: string, options?: RequestOptions): Promise<Run> {
    return this.action(id, "pause", undefined, options);
  }

  /** Resumes a paused run. */
  resume(id: string, options?: RequestOptions): Promise<Run> {
    return this.action(id, "resume", undefined, options);
  }

  /** A new run from one of this run's checkpoints (time travel). */
  fork(id: string, body: ForkBody = {}, options?: IdempotentOptions): Promise<Run> {
    return this.transport.json(
      { method: "POST", path: path`/v1/runs/${id}/fork`, body, headers: idempotency(options), retryable: true },
      options,
    );
  }

  /** The stored history as JSON (every event, or those after `after`). Use `join` to follow. */
  events(id: string, params: { after?: number } = {}, options?: RequestOptions): Promise<Event[]> {
    return this.transport.json({ method: "GET", path: path`/v1/runs/${id}/events`, query: params }, options);
  }

  /** Every step attempt. */
  steps(id: string, options?: RequestOptions): Promise<StepView[]> {
    return this.transport.json({ method: "GET", path: path`/v1/runs/${id}/steps` }, options);
  }

  /** Every plan version with the reason it was made. */
  plans(id: string, options?: RequestOptions): Promise<PlanRecord[]> {
    return this.transport.json({ method: "GET", path: path`/v1/runs/${id}/plans` }, options);
  }

  /** Checkpoints, oldest first. */
  checkpoints(id: string, params: QueryOf<"run_checkpoints"> = {}, options?: RequestOptions): Promise<Checkpoint[]> {
    return this.transport.json({ method: "GET", path: path`/v1/runs/${id}/checkpoints`, query: params }, options);
  }

  /** Where the run's time went. */
  timeline(id: string, options?: RequestOptions): Promise<Timeline> {
    return this.transport.json({ method: "GET", path: path`/v1/runs/${id}/timeline` }, options);
  }

  /** The delivery of the run's completion webhook. */
  webhook(id: string, options?: RequestOptions): Promise<WebhookDelivery> {
    return this.transport.json({ method: "GET", path: path`/v1/runs/${id}/webhook` }, options);
  }

  /**
   * Creates a run and follows its events (see {@link RunStream}): reconnects on a dropped
   * connection, answers `input_required` with `options.onInput`.
   */
  stream(body: RunRequest, options: StreamOptions & { idempotencyKey?: string } = {}): RunStream {
    const { idempotencyKey = uuid(), ...rest } = options;
    return new RunStream(this.transport, { create: body, idempotencyKey }, rest);
  }

  /** Follows an existing run's events from the start (or after `after`). */
  join(id: string, options: StreamOptions & { after?: number } = {}): RunStream {
    const { after = 0, ...rest } = options;
    return new RunStream(this.transport, { runId: id, after }, rest);
  }

  /** Creates a run, follows it to its end (answering input with `onInput`) and returns it. */
  run(body: RunRequest, options: StreamOptions & { idempotencyKey?: string } = {}): Promise<RunDetail> {
    return this.stream(body, options).finalRun();
  }

  private action(id: string, name: string, body: unknown, options?: RequestOptions): Promise<Run> {
    return this.transport.json({ method: "POST", path: `${path`/v1/runs/${id}`}/${name}`, body }, options);
  }
}

function idempotency(options?: IdempotentOptions): Record<string, string> {
  return { "idempotency-key": options?.idempotencyKey ?? uuid() };
}
