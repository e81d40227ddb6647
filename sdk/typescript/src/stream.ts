/**
 * Following a run's event stream: typed events in seq order, exactly once each, across dropped
 * connections and server restarts (reconnecting with `Last-Event-ID`), answering
 * `input_required` through a callback, and the final run at the end.
 */
import { APIConnectionError, OrcaError, StreamError } from "./errors.js";
import { readSSE } from "./sse.js";
import { backoff, sleep, type RequestOptions, type Transport } from "./transport.js";
import type { Event, InputRequiredData, InputRequiredEvent, FinalEvent, Run, RunDetail, RunRequest } from "./types.js";

/** Answers an `input_required` event: returns the value to send as the step's input. */
export type InputHandler = (data: InputRequiredData, event: InputRequiredEvent) => unknown | Promise<unknown>;

export interface StreamOptions extends Pick<RequestOptions, "headers" | "timeout"> {
  /** Called for every `input_required` event; its value is posted to `/v1/runs/{id}/input`. */
  onInput?: InputHandler;
  /** Stops following (closes the connection; the run goes on). */
  signal?: AbortSignal;
  /** Reconnect attempts in a row without a new event before giving up (default 10). */
  maxReconnects?: number;
  /** Milliseconds without a byte (orca sends a keep-alive every 15 s) before reconnecting (default 45000). */
  idleTimeout?: number;
}

/** Where a stream starts: a new run (POST /v1/runs) or an existing one after `after`. */
export type StreamSource =
  | { create: RunRequest; idempotencyKey: string }
  | { runId: string; after: number };

const DEFAULT_MAX_RECONNECTS = 10;
const DEFAULT_IDLE_TIMEOUT_MS = 45_000;

/** The next event was not the one after the last (seq jumped): reconnect from the last seen. */
class SequenceGap extends OrcaError {}

/**
 * A run's events, iterated once with `for await`. Breaking out of the loop (or {@link close},
 * which ends the loop quietly) closes the connection and does not cancel the run; aborting the
 * `signal` does too, and the loop throws the signal's reason. An error thrown by `onInput` or by
 * posting its answer ends the loop with that error. {@link finalRun} gives the run as it ended.
 */
export class RunStream implements AsyncIterable<Event> {
  private lastSeq: number;
  private id: string | undefined;
  private finalEvent: FinalEvent | undefined;
  private started = false;
  private closed = false;
  private readonly controller = new AbortController();
  private readonly iterator: AsyncGenerator<Event>;

  constructor(
    private readonly transport: Transport,
    private readonly source: StreamSource,
    private readonly options: StreamOptions = {},
  ) {
    this.lastSeq = "runId" in source ? source.after : 0;
    this.id = "runId" in source ? source.runId : undefined;
    const outer = options.signal;
    if (outer) {
      if (outer.aborted) this.controller.abort(outer.reason);
      else outer.addEventListener("abort", () => this.controller.abort(outer.reason), { once: true });
    }
    this.iterator = this.follow();
  }

  /** The run's id (known once its first event arrived, or from the start for a join). */
  get runId(): string | undefined {
    return this.id;
  }

  /** The seq of the last event yielded (0 before the first). */
  get lastEventId(): number {
    return this.lastSeq;
  }

  /** The `final` event, once it has been received. */
  get final(): FinalEvent | undefined {
    return this.finalEvent;
  }

  [Symbol.asyncIterator](): AsyncIterator<Event> {
    if (this.started) throw new OrcaError("a RunStream can be iterated only once");
    this.started = true;
    return this.iterator;
  }

  /** Stops following: closes the connection. The run itself goes on. */
  async close(): Promise<void> {
    this.closed = true;
    this.controller.abort(new OrcaError("stream closed"));
    await this.iterator.return(undefined);
  }

  /**
   * Cancels the run on the server (asked explicitly: leaving a stream never does), then closes
   * the stream. Returns the run as the cancel left it; a run that has already ended is a
   * ConflictError. Before the first event the run's id is unknown: a StreamError.
   */
  async cancel(): Promise<Run> {
    if (!this.id) throw new StreamError("the run's id is not known yet (no event received)");
    const run = await this.transport.json<Run>({
      method: "POST",
      path: `/v1/runs/${encodeURIComponent(this.id)}/cancel`,
    });
    await this.close();
    return run;
  }

  /**
   * Follows the stream to its end (events not yet iterated are consumed, `onInput` still
   * answers) and returns the run as stored after its `final` event. After leaving the loop
   * early (or {@link close}) it returns the run as it stands: `runs.join` follows it again.
   */
  async finalRun(): Promise<RunDetail> {
    if (!this.started) {
      this.started = true;
      for await (const _ of this.iterator);
    } else if (!this.finalEvent) {
      for await (const _ of { [Symbol.asyncIterator]: () => this.iterator });
    }
    if (!this.id) throw new StreamError("the stream ended before any event");
    return this.transport.json<RunDetail>({
      method: "GET",
      path: `/v1/runs/${encodeURIComponent(this.id)}`,
      signal: this.options.signal,
    });
  }

  /** The reconnect loop: one connection after another until `final` (or a 204). */
  private async *follow(): AsyncGenerator<Event> {
    const maxReconnects = this.options.maxReconnects ?? DEFAULT_MAX_RECONNECTS;
    let failures = 0;
    try {
      for (;;) {
        let progressed = false;
        try {
          const response = await this.connect();
          if (response.status === 204 || !response.body) return; // finished, nothing follows
          this.adoptLocation(response);
          for await (const event of this.events(response.body)) {
            progressed = true;
            failures = 0;
            yield event;
            if (event.kind === "final") return;
          }
          // The server closed the stream before `final` (e.g. shutting down): reconnect.
        } catch (error) {
          if (this.closed) return; // close(): end the iteration quietly
          if (this.controller.signal.aborted) throw this.controller.signal.reason ?? error;
          if (!isDrop(error)) throw error;
          if (!progressed && failures >= maxReconnects) {
            throw new StreamError(`gave up after ${failures} reconnects: ${String(error)}`, { cause: error });
          }
        }
        if (!progressed) failures++;
        try {
          await sleep(backoff(Math.max(0, failures - 1)) * 1000, this.controller.signal);
        } catch (error) {
          if (this.closed) return; // closed while waiting to reconnect
          throw error;
        }
      }
    } finally {
      this.controller.abort(new OrcaError("stream finished"));
    }
  }

  /**
   * A streamed create names its run in `Location` (exposed to browsers by orca's CORS): once
   * known, a connection lost before the first event resumes with GET .../events instead of
   * posting again.
   */
  private adoptLocation(response: Response): void {
    const location = response.headers.get("location");
    if (this.id === undefined && location?.startsWith("/v1/runs/")) {
      this.id = decodeURIComponent(location.slice("/v1/runs/".length));
    }
  }

  /** Opens one connection: the POST that creates the run, or GET events after the last seq. */
  private connect(): Promise<Response> {
    const headers = { ...this.options.headers, accept: "text/event-stream" };
    const common = { stream: true, signal: this.controller.signal } as const;
    const options = { timeout: this.options.timeout } as RequestOptions;
    if (this.id === undefined && "create" in this.source) {
      // The run's id is unknown (cut before the answer's headers): the same Idempotency-Key gets the same run.
      return this.transport.send(
        {
          method: "POST",
          path: "/v1/runs",
          body: this.source.create,
          headers: { ...headers, "idempotency-key": this.source.idempotencyKey },
          retryable: true,
          ...common,
        },
        options,
      );
    }
    return this.transport.send(
      {
        method: "GET",
        path: `/v1/runs/${encodeURIComponent(this.id!)}/events`,
        headers: { ...headers, "last-event-id": String(this.lastSeq) },
        ...common,
      },
      options,
    );
  }

  /** The new events of one connection, in order, each once; answers `input_required`. */
  private async *events(body: ReadableStream<Uint8Array>): AsyncGenerator<Event> {
    const idle = this.options.idleTimeout ?? DEFAULT_IDLE_TIMEOUT_MS;
    for await (const message of readSSE(body, idle)) {
      const event = JSON.parse(message.data) as Event;
      if (event.seq <= this.lastSeq) continue; // already yielded (a replay after reconnecting)
      if (event.seq !== this.lastSeq + 1) {
        throw new SequenceGap(`expected event ${this.lastSeq + 1}, got ${event.seq}`);
      }
      this.lastSeq = event.seq;
      this.id = event.run_id;
      if (event.kind === "final") this.finalEvent = event;
      if (event.kind === "input_required" && this.options.onInput) await this.answer(event);
      yield event;
    }
  }

  /** Asks the callback for the value and posts it as the step's input. */
  private async answer(event: InputRequiredEvent): Promise<void> {
    const value = await this.options.onInput!(event.data, event);
    await this.transport.json({
      method: "POST",
      path: `/v1/runs/${encodeURIComponent(event.run_id)}/input`,
      body: { step_id: event.data.step_id, value },
      signal: this.controller.signal,
    });
  }
}

/** Whether an error while following means "the connection is gone, try again". */
function isDrop(error: unknown): boolean {
  if (error instanceof SequenceGap || error instanceof APIConnectionError) return true;
  if (error instanceof OrcaError) return (error as { status?: number }).status === 503;
  // fetch body read failures (socket closed, "terminated", network error) are TypeErrors.
  return error instanceof TypeError || (error as { name?: string } | undefined)?.name === "AbortError";
}
