/**
 * The API's types, all generated from openapi.yaml (src/generated/openapi.ts, `npm run
 * generate`) and schemas/ (src/generated/definitions.ts): every schema by its name (`Run`, `RunRequest`, `Event`, `StatusEvent`, ...), plus
 * `paths`, `components` and `operations` for anything else. Nothing here is written by hand
 * except the small helpers below, which only select from the generated ones.
 */
export type * from "./generated/openapi.js";
/**
 * The definitions a caller writes, generated from the JSON Schemas in schemas/
 * (src/generated/definitions.ts): a plan (`AgentPlan`, whose steps narrow `input` on `kind`), a
 * workflow, an agent, an HTTP tool. Every part of them is under `definitions` (e.g.
 * `definitions.AgentPlanToolInput`).
 */
export type { Agent, AgentPlan, AgentPlanStep as PlanStep, FixedWorkflow, HttpTool, WorkerTool } from "./generated/definitions.js";
export type * as definitions from "./generated/definitions.js";
import type { Event, EventKind, operations } from "./generated/openapi.js";

/** The event of one kind: `EventOf<"token">` is `TokenEvent`. */
export type EventOf<K extends EventKind> = Extract<Event, { kind: K }>;

/** The query parameters of an operation, by its operationId (e.g. `QueryOf<"list_runs">`). */
export type QueryOf<Op extends keyof operations> = operations[Op] extends { parameters: { query?: infer Q } }
  ? NonNullable<Q>
  : never;

/** The JSON request body of an operation, by its operationId (e.g. `BodyOf<"put_agent">`). */
export type BodyOf<Op extends keyof operations> = JsonContent<NonNullable<operations[Op]["requestBody"]>>;

type JsonContent<T> = T extends { content: { "application/json": infer B } } ? B : never;
