// Streaming against a real server: typed events in order, a stream cut mid-run by a proxy, a
// stream across a server restart, input answered through the callback, leaving a stream.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client } from "@orca/client";
import net from "node:net";
import { askingWorkflow, cuttingProxy, recordingFetch, startOrca, waitFor, words } from "./harness.mjs";

/** Asserts the streamed events are exactly the stored history: same seqs 1..n, same order, once each. */
async function assertSameAsHistory(client, runId, streamed) {
  const history = await client.runs.events(runId);
  assert.deepEqual(
    streamed.map((e) => e.seq),
    streamed.map((_, i) => i + 1),
    "streamed seqs are 1..n with no duplicate and no gap",
  );
  assert.deepEqual(
    streamed.map((e) => [e.seq, e.kind]),
    history.map((e) => [e.seq, e.kind]),
    "the stream carried exactly the stored history",
  );
  assert.deepEqual(streamed, history, "every event identical to the stored one");
  assert.equal(streamed.at(-1).kind, "final");
}

describe("streaming", () => {
  let orca;
  before(async () => {
    orca = await startOrca({ ORCA_LLM__OFFLINE_TOKEN_DELAY_MS: "15" });
  });
  after(() => orca?.close());

  test("stream() yields typed events then the final run", async () => {
    const client = new Client({ baseURL: orca.url });
    const stream = client.runs.stream({ input: "10 + 20 계산해줘" });
    const events = [];
    for await (const event of stream) events.push(event);
    const run = await stream.finalRun();
    assert.equal(run.id, stream.runId);
    assert.equal(run.status, "succeeded");
    assert.equal(stream.final?.data.output, run.output);
    assert.ok(events.some((e) => e.kind === "tool_call" && e.data.tool === "math.calculate"));
    await assertSameAsHistory(client, run.id, events);
  });

  test("a stream cut mid-run three times reconnects with no duplicate and no gap", async () => {
    const proxy = await cuttingProxy(orca.port, [700, 1500, 2600]);
    try {
      const client = new Client({ baseURL: proxy.url });
      const stream = client.runs.stream({ input: words(80) });
      const events = [];
      for await (const event of stream) events.push(event);
      assert.equal(proxy.cutCount, 3, "the proxy cut the stream three times");
      assert.equal(stream.final?.data.status, "succeeded");
      await assertSameAsHistory(new Client({ baseURL: orca.url }), stream.runId, events);
    } finally {
      await proxy.close();
    }
  });

  test("a stream cut after its headers follows the run's Location without posting again", async () => {
    const head = await responseHeadLength(orca.port, { input: words(20, "measure") });
    const proxy = await cuttingProxy(orca.port, [head]);
    try {
      const { fetch, calls } = recordingFetch();
      const client = new Client({ baseURL: proxy.url, fetch });
      const stream = client.runs.stream({ input: words(30, "located") });
      const events = [];
      for await (const event of stream) events.push(event);
      assert.equal(proxy.cutCount, 1, "the proxy cut the stream after its headers");
      const sent = calls.map((c) => `${c.method} ${new URL(c.url).pathname}`);
      assert.deepEqual(sent, ["POST /v1/runs", `GET /v1/runs/${stream.runId}/events`]);
      const direct = new Client({ baseURL: orca.url });
      await assertSameAsHistory(direct, stream.runId, events);
      const made = [];
      for await (const run of direct.runs.list({ q: "located" })) made.push(run.id);
      assert.deepEqual(made, [stream.runId], "one run");
    } finally {
      await proxy.close();
    }
  });

  test("join() follows an existing run from the start, or after a seq", async () => {
    const client = new Client({ baseURL: orca.url });
    const run = await client.runs.create({ input: words(20) });
    const all = [];
    for await (const event of client.runs.join(run.id)) all.push(event);
    await assertSameAsHistory(client, run.id, all);
    const rest = [];
    for await (const event of client.runs.join(run.id, { after: 3 })) rest.push(event);
    assert.deepEqual(rest, all.slice(3));
    // After the final event a join gets 204 and yields nothing.
    const none = [];
    for await (const event of client.runs.join(run.id, { after: all.length })) none.push(event);
    assert.deepEqual(none, []);
  });

  test("breaking out of a stream closes it and does not cancel the run", async () => {
    const client = new Client({ baseURL: orca.url });
    const stream = client.runs.stream({ input: words(60) });
    for await (const event of stream) {
      if (event.kind === "token") break;
    }
    const id = stream.runId;
    assert.ok(id);
    const run = await waitFor("the run to finish on its own", async () => {
      const r = await client.runs.get(id);
      return ["succeeded", "failed", "cancelled", "timed_out"].includes(r.status) && r;
    });
    assert.equal(run.status, "succeeded", "the run was not cancelled by leaving the stream");
  });

  test("close() from another task ends the loop quietly; an aborted signal throws its reason", async () => {
    const client = new Client({ baseURL: orca.url });
    const stream = client.runs.stream({ input: words(60) });
    const seen = [];
    for await (const event of stream) {
      seen.push(event);
      if (event.kind === "token") setTimeout(() => stream.close(), 0); // while the loop waits
    }
    assert.notEqual(seen.at(-1).kind, "final", "the loop ended before the run did");
    const controller = new AbortController();
    const aborted = client.runs.join(stream.runId, { signal: controller.signal });
    const error = await (async () => {
      for await (const event of aborted) if (event.seq === 2) controller.abort(new Error("user stop"));
    })().catch((e) => e);
    assert.equal(error?.message, "user stop");
  });

  test("stream.cancel() cancels the run when asked, and ends the loop", async () => {
    const client = new Client({ baseURL: orca.url });
    const stream = client.runs.stream({ input: words(200) });
    const kinds = [];
    for await (const event of stream) {
      kinds.push(event.kind);
      if (event.kind === "token") await stream.cancel();
    }
    assert.ok(!kinds.includes("final"), "the loop ended at the cancel");
    const run = await waitFor("cancelled", async () => {
      const r = await client.runs.get(stream.runId);
      return r.status === "cancelled" && r;
    });
    assert.equal(run.completion, "cancelled");
  });

  test("input_required is answered through the onInput callback", async () => {
    const client = new Client({ baseURL: orca.url });
    const asked = [];
    const stream = client.runs.stream(
      { input: "x", orchestration: "fixed", workflow: askingWorkflow() },
      {
        onInput: async (data, event) => {
          asked.push({ data, kind: event.kind });
          return "Ada";
        },
      },
    );
    const kinds = [];
    for await (const event of stream) kinds.push(event.kind);
    const run = await stream.finalRun();
    assert.deepEqual(asked.map((a) => [a.kind, a.data.step_id, a.data.prompt]), [["input_required", "ask", "your name?"]]);
    assert.ok(kinds.includes("input_required"));
    assert.equal(run.status, "succeeded");
    assert.match(String(run.output), /hello Ada/);
    const steps = await client.runs.steps(run.id);
    assert.equal(steps.find((s) => s.step_id === "ask")?.output, "Ada");
  });

  test("runs.run() with onInput returns the final run", async () => {
    const client = new Client({ baseURL: orca.url });
    const run = await client.runs.run(
      { input: "x", orchestration: "fixed", workflow: askingWorkflow("ask2") },
      { onInput: () => "Grace" },
    );
    assert.equal(run.status, "succeeded");
    assert.match(String(run.output), /hello Grace/);
  });
});

describe("a stream across a server restart", () => {
  let orca;
  before(async () => {
    orca = await startOrca({ ORCA_LLM__OFFLINE_TOKEN_DELAY_MS: "20" });
  });
  after(() => orca?.close());

  test("the server is killed and started again mid-run: the stream goes on, nothing twice, nothing lost", async () => {
    const client = new Client({ baseURL: orca.url });
    const stream = client.runs.stream({ input: words(80) });
    const events = [];
    let restarted = false;
    for await (const event of stream) {
      events.push(event);
      if (!restarted && event.kind === "token") {
        restarted = true;
        await orca.restart(); // SIGKILL, then the same port and database
      }
    }
    assert.ok(restarted);
    assert.equal(stream.final?.data.status, "succeeded");
    await assertSameAsHistory(client, stream.runId, events);
  });
});

/** Bytes of the head (status line and headers) of a streamed create's response from orca. */
async function responseHeadLength(port, body) {
  const payload = Buffer.from(JSON.stringify(body));
  const socket = net.connect(port, "127.0.0.1");
  socket.write(
    `POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAccept: text/event-stream\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${payload.length}\r\n\r\n`,
  );
  socket.write(payload);
  let received = Buffer.alloc(0);
  for await (const chunk of socket) {
    received = Buffer.concat([received, chunk]);
    const end = received.indexOf("\r\n\r\n");
    if (end >= 0) {
      socket.destroy();
      return end + 4;
    }
  }
  throw new Error("orca closed before its headers");
}
