// Runs orca's AG-UI endpoint with the protocol's own client (`@ag-ui/client`'s HttpAgent,
// which verifies event order) and checks every event against `@ag-ui/core`'s schemas.
// Started by tests/it/agui.rs, which asserts on what this prints.
//
//   node tests/browser/agui.mjs <base-url> <script-json> [api-key]
//
// The script: {threadId, messages, calls: [{runId, forwardedProps?, resume?: {status, payload}}]}.
// A call with `resume` answers the interrupt the previous call ended with.
// Prints one JSON line per call ({call, events, invalid, error, result}), then the agent's
// messages and state.

import { HttpAgent } from '@ag-ui/client';
import { EventSchemas } from '@ag-ui/core/schemas';

const [base, scriptJson, key] = process.argv.slice(2);
const script = JSON.parse(scriptJson);
const agent = new HttpAgent({
  url: `${base}/v1/agui`,
  threadId: script.threadId,
  initialMessages: script.messages,
  headers: key ? { authorization: `Bearer ${key}` } : {},
});

let interrupt = null;
for (const call of script.calls) {
  const events = [];
  const invalid = [];
  const params = { runId: call.runId, forwardedProps: call.forwardedProps };
  if (call.resume) {
    params.resume = [{ interruptId: interrupt?.id ?? 'none', status: call.resume.status, payload: call.resume.payload }];
  }
  let error = null;
  let result = null;
  try {
    const done = await agent.runAgent(params, {
      onEvent: ({ event }) => {
        events.push(event);
        const checked = EventSchemas.safeParse(event);
        if (!checked.success) invalid.push({ type: event.type, issues: checked.error.issues });
      },
    });
    result = done.result ?? null;
  } catch (e) {
    error = String(e?.message || e);
  }
  const finished = events.find((e) => e.type === 'RUN_FINISHED');
  if (finished) interrupt = finished.outcome?.type === 'interrupt' ? finished.outcome.interrupts[0] : null;
  console.log(JSON.stringify({ call: call.runId, events, invalid, error, result }));
}
console.log(JSON.stringify({ messages: agent.messages, state: agent.state }));
