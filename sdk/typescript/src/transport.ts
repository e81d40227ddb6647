/**
 * The HTTP layer: builds URLs and headers, applies the timeout, maps error responses to typed
 * errors and retries what is safe to retry (429, 503 and connection errors on idempotent calls
 * and on POSTs that carry an Idempotency-Key), honouring `Retry-After`.
 */
import {
  APIConnectionError,
  APITimeoutError,
  OrcaError,
  errorFor,
  type APIError,
} from "./errors.js";

/** The `fetch` signature the client needs; pass your own (a wrapper, a proxy agent...). */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

/** Query parameters; undefined values are left out, arrays repeat the key. */
export type Query = Record<string, string | number | boolean | undefined | null | Array<string | number>>;

export interface TransportOptions {
  baseURL: string;
  apiKey: string | undefined;
  /** Milliseconds for one attempt to receive the response headers (and the body, for JSON calls). */
  timeout: number;
  maxRetries: number;
  headers: Record<string, string>;
  fetch: FetchLike;
}

/** One call to the API. */
export interface RequestSpec {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Query | undefined;
  body?: unknown;
  headers?: Record<string, string | undefined> | undefined;
  /** Whether a retry is safe. Defaults to true for GET, PUT and DELETE, false otherwise. */
  retryable?: boolean;
  /** Aborts the call (and any wait between retries). */
  signal?: AbortSignal | undefined;
  /** Applies the timeout to the headers only (streams read their body for as long as they last). */
  stream?: boolean;
}

/** Per-call options every resource method accepts. */
export interface RequestOptions {
  signal?: AbortSignal;
  /** Extra headers for this call. */
  headers?: Record<string, string>;
  /** Overrides the client's `timeout` for this call (ms). */
  timeout?: number;
  /** Overrides the client's `maxRetries` for this call. */
  maxRetries?: number;
}

/** Backoff between retries when the server gives no `Retry-After`: base, cap (seconds). */
const BACKOFF_BASE_SECONDS = 0.5;
const BACKOFF_CAP_SECONDS = 8;

export class Transport {
  constructor(readonly options: TransportOptions) {}

  /** Sends a call and returns the parsed JSON body (undefined for a 204 or an empty body). */
  async json<T>(spec: RequestSpec, options?: RequestOptions): Promise<T> {
    const response = await this.send(spec, options);
    const text = await response.text();
    return (text === "" ? undefined : JSON.parse(text)) as T;
  }

  /** Sends a call and returns the body as text (e.g. /metrics). */
  async text(spec: RequestSpec, options?: RequestOptions): Promise<string> {
    const response = await this.send(spec, options);
    return response.text();
  }

  /**
   * Sends a call, retrying as the policy allows, and returns the successful response with its
   * body unread. Throws an {@link APIError} subclass for a 4xx/5xx, {@link APIConnectionError}
   * or {@link APITimeoutError} when no response came.
   */
  async send(spec: RequestSpec, options?: RequestOptions): Promise<Response> {
    const retryable = spec.retryable ?? ["GET", "PUT", "DELETE"].includes(spec.method);
    const maxRetries = retryable ? (options?.maxRetries ?? this.options.maxRetries) : 0;
    const signal = anySignal([spec.signal, options?.signal]);
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.attempt(spec, options, signal);
      } catch (error) {
        const wait = retryDelay(error, attempt, maxRetries);
        if (wait === undefined) throw error;
        await sleep(wait * 1000, signal);
      }
    }
  }

  /** One attempt: a fetch under the timeout; an error status becomes a typed error. */
  private async attempt(
    spec: RequestSpec,
    options: RequestOptions | undefined,
    signal: AbortSignal | undefined,
  ): Promise<Response> {
    const timeoutMs = options?.timeout ?? this.options.timeout;
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    const release = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    };
    let streaming = false;
    try {
      if (signal?.aborted) throw signal.reason;
      const response = await this.options.fetch(this.url(spec.path, spec.query), {
        method: spec.method,
        headers: this.headers(spec, options),
        body: spec.body === undefined ? null : JSON.stringify(spec.body),
        signal: controller.signal,
      });
      if (!response.ok) {
        const text = await response.text();
        throw errorFor({ status: response.status, headers: response.headers, body: parseJson(text), text });
      }
      if (spec.stream) {
        // The timeout covered the headers; the body lives on, still abortable by the caller.
        clearTimeout(timer);
        streaming = true;
        return response;
      }
      // Buffer the body under the same timeout so a stalled body cannot hang the call.
      const body = await response.arrayBuffer();
      return new Response(response.status === 204 ? null : body, {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
    } catch (error) {
      if (error instanceof OrcaError) throw error;
      if (signal?.aborted) throw signal.reason ?? error;
      if (timedOut) throw new APITimeoutError(`no response within ${timeoutMs} ms`, { cause: error });
      throw new APIConnectionError(`connection failed: ${describe(error)}`, { cause: error });
    } finally {
      if (!streaming) release();
    }
  }

  /** The absolute URL of a path with its query string. */
  url(path: string, query?: Query): string {
    const url = new URL(this.options.baseURL.replace(/\/+$/, "") + path);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value === undefined || value === null) continue;
      for (const item of Array.isArray(value) ? value : [value]) url.searchParams.append(key, String(item));
    }
    return url.toString();
  }

  private headers(spec: RequestSpec, options: RequestOptions | undefined): Record<string, string> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (spec.body !== undefined) headers["content-type"] = "application/json";
    if (this.options.apiKey) headers["authorization"] = `Bearer ${this.options.apiKey}`;
    Object.assign(headers, lowerKeys(this.options.headers), lowerKeys(options?.headers ?? {}));
    for (const [key, value] of Object.entries(spec.headers ?? {})) {
      if (value !== undefined) headers[key.toLowerCase()] = value;
    }
    return headers;
  }
}

/**
 * Seconds to wait before retrying after `error`, or undefined when it must not be retried:
 * only 429, 503 and connection errors, only while attempts remain. `Retry-After` wins; else
 * exponential backoff with full jitter in its upper half, capped.
 */
export function retryDelay(error: unknown, attempt: number, maxRetries: number): number | undefined {
  if (attempt >= maxRetries) return undefined;
  if (error instanceof APIConnectionError) return backoff(attempt);
  const status = (error as APIError | undefined)?.status;
  if (!(error instanceof OrcaError) || (status !== 429 && status !== 503)) return undefined;
  return (error as APIError).retryAfter ?? backoff(attempt);
}

/** Exponential backoff with jitter: between half and all of min(cap, base * 2^attempt). */
export function backoff(attempt: number): number {
  const ceiling = Math.min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** attempt);
  return ceiling * (0.5 + Math.random() / 2);
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** One signal that aborts when any of the given ones does (AbortSignal.any is not in Node 18). */
export function anySignal(signals: Array<AbortSignal | undefined>): AbortSignal | undefined {
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  if (present.length <= 1) return present[0];
  const controller = new AbortController();
  for (const signal of present) {
    if (signal.aborted) {
      controller.abort(signal.reason);
      break;
    }
    signal.addEventListener("abort", () => controller.abort(signal.reason), { once: true });
  }
  return controller.signal;
}

/** A random UUID v4, from Web Crypto when present (browsers, Node 19+), else getRandomValues. */
export function uuid(): string {
  const webCrypto = (globalThis as { crypto?: Crypto }).crypto;
  if (webCrypto?.randomUUID) return webCrypto.randomUUID();
  const bytes = new Uint8Array(16);
  if (webCrypto?.getRandomValues) webCrypto.getRandomValues(bytes);
  else for (let i = 0; i < 16; i++) bytes[i] = Math.floor(Math.random() * 256);
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function lowerKeys(headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
}

function describe(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } } | undefined)?.cause;
  const message = error instanceof Error ? error.message : String(error);
  return cause?.code ? `${message} (${cause.code})` : message;
}
