// Type-checked (tsc --noEmit) against the INSTALLED package by .ci/sdk-typescript: the event
// union narrows on `kind`, and the compiler rejects what narrowing should forbid.
import { Client, UnprocessableEntityError, type AgentPlan, type Event, type EventOf, type RunDetail } from "@orca/client";

/** A plan typed by schemas/AgentPlan.schema.json: each step's `input` narrows on its `kind`, nested steps too. */
export const plan: AgentPlan = {
  steps: [
    { id: "ask", kind: "user_input", input: { prompt: "go on?" } },
    {
      id: "both",
      kind: "sequential",
      depends_on: ["ask"],
      input: { steps: [{ id: "sum", kind: "tool", input: { tool: "math.calculate", arguments: { expression: "1 + 2" } } }] },
    },
  ],
};

export const wrongInput: AgentPlan = {
  // @ts-expect-error a tool step's input names its `tool`, not a `prompt`
  steps: [{ id: "t", kind: "tool", input: { prompt: "hi" } }],
};

export const wrongNestedInput: AgentPlan = {
  steps: [
    // @ts-expect-error a nested user_input step needs its `prompt`
    { id: "outer", kind: "sequential", input: { steps: [{ id: "inner", kind: "user_input", input: {} }] } },
  ],
};

/** One line per event; every kind handled, the switch checked exhaustive. */
export function describe(event: Event): string {
  switch (event.kind) {
    case "token":
    case "json_partial":
      return event.data.text;
    case "status":
      return `status ${event.data.status}`;
    case "tool_call":
      return `calling ${event.data.tool}(${JSON.stringify(event.data.arguments)})`;
    case "tool_result":
      return `${event.data.tool} answered`;
    case "input_required":
      return `asks ${event.data.prompt} (step ${event.data.step_id})`;
    case "step":
      return `step ${event.data.step_id} ${event.data.status}`;
    case "plan":
      return `plan v${event.data.version}`;
    case "handoff":
      return `${event.data.from} -> ${event.data.to}`;
    case "speaker":
      return `${event.data.agent} speaks`;
    case "usage":
      return `${event.data.prompt_tokens}+${event.data.completion_tokens} tokens`;
    case "error":
      return `error ${event.data.code}`;
    case "final":
      return `final ${event.data.status} ${event.data.completion}`;
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

export async function example(): Promise<RunDetail> {
  const client = new Client({ baseURL: "http://127.0.0.1:8080", maxRetries: 3 });
  const stream = client.runs.stream({ input: "10 + 20", orchestration: "simple" }, { onInput: (data) => data.prompt });
  for await (const event of stream) {
    // @ts-expect-error `data.text` exists only once `kind` is narrowed to token/json_partial
    void event.data.text;
    if (event.kind === "token") {
      const text: string = event.data.text;
      void text;
    }
  }
  const token: EventOf<"token"> | undefined = undefined;
  void token;
  try {
    await client.runs.create({ input: "x", orchestration: "fixed" });
  } catch (error) {
    if (error instanceof UnprocessableEntityError) {
      const pointers: string[] = error.errors.map((e) => e.pointer);
      void pointers;
    }
  }
  // @ts-expect-error `orchestration` is an enum: a typo is a compile error
  await client.runs.create({ input: "x", orchestration: "planer" });
  return stream.finalRun();
}
