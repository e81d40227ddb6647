/**
 * The errors the client throws. Every one is an {@link OrcaError}; an HTTP error response is an
 * {@link APIError} subclass chosen by status and carries the server's problem+json document.
 */

import type { FieldError } from "./types.js";

/** The base of every error this library throws. */
export class OrcaError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** What an {@link APIError} is built from: the response's status, headers and body. */
export interface ProblemResponse {
  status: number;
  headers: Headers;
  /** The parsed body when it was JSON (normally RFC 9457 problem+json), else undefined. */
  body: unknown;
  /** The raw body text (useful when it was not JSON). */
  text: string;
}

/** The server answered with a 4xx/5xx status. */
export class APIError extends OrcaError {
  /** The HTTP status. */
  readonly status: number;
  /** The stable snake_case code of the problem (e.g. `validation_failed`), or `http_<status>`. */
  readonly code: string;
  readonly title: string;
  readonly detail: string;
  /** Located problems (422): each a JSON Pointer and a message. Empty when none. */
  readonly errors: FieldError[];
  /** Seconds from the `Retry-After` header, when the server sent one. */
  readonly retryAfter: number | undefined;
  /** The whole problem document as the server sent it (undefined when the body was not JSON). */
  readonly problem: Record<string, unknown> | undefined;
  readonly headers: Headers;

  constructor(response: ProblemResponse) {
    const problem = isObject(response.body) ? response.body : undefined;
    const code = stringField(problem, "code") ?? `http_${response.status}`;
    const title = stringField(problem, "title") ?? `HTTP ${response.status}`;
    const detail = stringField(problem, "detail") ?? response.text.slice(0, 500);
    super(`${response.status} ${code}: ${detail || title}`);
    this.status = response.status;
    this.code = code;
    this.title = title;
    this.detail = detail;
    this.errors = fieldErrors(problem);
    this.retryAfter = parseRetryAfter(response.headers.get("retry-after"));
    this.problem = problem;
    this.headers = response.headers;
  }
}

/** 400: the body was not valid JSON (`invalid_json`) or a request was malformed. */
export class BadRequestError extends APIError {}
/** 401: missing or wrong API key. */
export class AuthenticationError extends APIError {}
/** 403: the key may not do this. */
export class PermissionDeniedError extends APIError {}
/** 404: no such run, workflow, version... (`not_found`). */
export class NotFoundError extends APIError {}
/** 409: the resource is in the wrong state (`conflict`). */
export class ConflictError extends APIError {}
/** 422: the request failed validation; {@link APIError.errors} lists the pointers. */
export class UnprocessableEntityError extends APIError {}
/** 429: over a quota or rate; {@link APIError.retryAfter} says when to try again. */
export class RateLimitedError extends APIError {}
/** 5xx: the server failed or is unavailable (503 carries `Retry-After`). */
export class ServerError extends APIError {}

/** The request never got an HTTP response: refused, reset, closed, DNS... */
export class APIConnectionError extends OrcaError {}

/** The request took longer than the client's `timeout`. */
export class APITimeoutError extends APIConnectionError {}

/** A run's event stream could not be followed to its end (reconnects exhausted, or a gap the
 * server kept sending). */
export class StreamError extends OrcaError {}

/** The {@link APIError} subclass for a status. */
export function errorFor(response: ProblemResponse): APIError {
  const byStatus: Record<number, typeof APIError> = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitedError,
  };
  const Kind = byStatus[response.status] ?? (response.status >= 500 ? ServerError : APIError);
  return new Kind(response);
}

/** `Retry-After` as seconds: a number of seconds or an HTTP date; undefined when absent or bad. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(value);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, (date - Date.now()) / 1000);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function stringField(object: Record<string, unknown> | undefined, key: string): string | undefined {
  const value = object?.[key];
  return typeof value === "string" ? value : undefined;
}

function fieldErrors(problem: Record<string, unknown> | undefined): FieldError[] {
  const errors = problem?.["errors"];
  if (!Array.isArray(errors)) return [];
  return errors.filter(isObject).map((error) => ({
    pointer: String(error["pointer"] ?? ""),
    message: String(error["message"] ?? ""),
  }));
}
