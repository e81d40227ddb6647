/** The entry point: `new Client()` and its resources. */
import { APIError, OrcaError } from "./errors.js";
import { Definitions, Models, UsageResource } from "./resources/misc.js";
import { Registry } from "./resources/registry.js";
import { Runs } from "./resources/runs.js";
import { Schedules } from "./resources/schedules.js";
import { Memory, Users } from "./resources/memory.js";
import { Sessions } from "./resources/sessions.js";
import { Tasks, Workers } from "./resources/tasks.js";
import { Transport, type FetchLike, type RequestOptions } from "./transport.js";
import type {
  AgentDetail,
  AgentSummary,
  BodyOf,
  FunctionDetail,
  FunctionInfo,
  FunctionSpec,
  ToolDetail,
  ToolInfo,
  WorkflowDetail,
  WorkflowSummary,
} from "./types.js";

export interface ClientOptions {
  /** The server's URL. Default: `ORCA_URL` from the environment, else http://127.0.0.1:8080. */
  baseURL?: string;
  /** Sent as `Authorization: Bearer ...`. Default: `ORCA_API_KEY` from the environment. */
  apiKey?: string;
  /** Milliseconds for one attempt (for a stream: until its headers arrive). Default 60000. */
  timeout?: number;
  /** Retries of 429/503/connection errors on safe calls; 0 disables. Default 2. */
  maxRetries?: number;
  /** Headers sent with every call. */
  headers?: Record<string, string>;
  /** Your own fetch (a wrapper, a proxy dispatcher, a test spy). Default: the global fetch. */
  fetch?: FetchLike;
}

export const DEFAULT_BASE_URL = "http://127.0.0.1:8080";
export const DEFAULT_TIMEOUT_MS = 60_000;
export const DEFAULT_MAX_RETRIES = 2;

export class Client {
  readonly runs: Runs;
  readonly workflows: Registry<WorkflowSummary, WorkflowDetail, BodyOf<"put_workflow">>;
  readonly agents: Registry<AgentSummary, AgentDetail, BodyOf<"put_agent">>;
  readonly tools: Registry<ToolInfo, ToolDetail, BodyOf<"put_tool">>;
  readonly functions: Registry<FunctionInfo, FunctionDetail, FunctionSpec>;
  readonly schedules: Schedules;
  readonly sessions: Sessions;
  /** Memory beyond one session: items by namespace and key, listed and searched. */
  readonly memory: Memory;
  /** A user's data, exported or erased whole. */
  readonly users: Users;
  /** Worker tools' tasks: list, get, and the worker protocol (poll, heartbeat, complete, fail). */
  readonly tasks: Tasks;
  /** The workers that polled recently. */
  readonly workers: Workers;
  readonly usage: UsageResource;
  readonly models: Models;
  readonly definitions: Definitions;
  /** The HTTP layer (URL building, retries); for calls this library does not wrap. */
  readonly transport: Transport;

  constructor(options: ClientOptions = {}) {
    const fetchImpl = options.fetch ?? globalThis.fetch?.bind(globalThis);
    if (!fetchImpl) throw new OrcaError("no fetch available: pass `fetch` in the client options");
    this.transport = new Transport({
      baseURL: options.baseURL ?? env("ORCA_URL") ?? DEFAULT_BASE_URL,
      apiKey: options.apiKey ?? env("ORCA_API_KEY"),
      timeout: options.timeout ?? DEFAULT_TIMEOUT_MS,
      maxRetries: options.maxRetries ?? DEFAULT_MAX_RETRIES,
      headers: options.headers ?? {},
      fetch: fetchImpl,
    });
    const t = this.transport;
    this.runs = new Runs(t);
    this.workflows = new Registry(t, "workflows");
    this.agents = new Registry(t, "agents");
    this.tools = new Registry(t, "tools");
    this.functions = new Registry(t, "functions");
    this.schedules = new Schedules(t);
    this.sessions = new Sessions(t);
    this.memory = new Memory(t);
    this.users = new Users(t);
    this.tasks = new Tasks(t);
    this.workers = new Workers(t);
    this.usage = new UsageResource(t);
    this.models = new Models(t);
    this.definitions = new Definitions(t);
  }

  /** The server's base URL in use. */
  get baseURL(): string {
    return this.transport.options.baseURL;
  }

  /** `GET /healthz`: true when the server is alive. */
  async health(options?: RequestOptions): Promise<boolean> {
    return this.probe("/healthz", options);
  }

  /** `GET /readyz`: true when it can serve (its store is reachable), false on 503. */
  async ready(options?: RequestOptions): Promise<boolean> {
    return this.probe("/readyz", options);
  }

  /** `GET /metrics`: the Prometheus text. */
  metrics(options?: RequestOptions): Promise<string> {
    return this.transport.text({ method: "GET", path: "/metrics", headers: { accept: "text/plain" } }, options);
  }

  private async probe(path: string, options?: RequestOptions): Promise<boolean> {
    try {
      await this.transport.json({ method: "GET", path }, { maxRetries: 0, ...options });
      return true;
    } catch (error) {
      if (error instanceof APIError && error.status === 503) return false;
      throw error;
    }
  }
}

/** An environment variable where there is an environment (Node, Deno, Bun); undefined in browsers. */
function env(name: string): string | undefined {
  const process = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  const value = process?.env?.[name];
  return value === undefined || value === "" ? undefined : value;
}
