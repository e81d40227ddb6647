// Every resource of the client against a real server, and the operationId -> method map
// against openapi.yaml.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { Client, ConflictError, NotFoundError, OPERATION_METHODS, OPERATIONS_NOT_WRAPPED } from "@orca/client";
import { askingWorkflow, startOrca, waitFor, words } from "./harness.mjs";

const TERMINAL = ["succeeded", "failed", "cancelled", "timed_out"];

test("every operationId of openapi.yaml has an SDK method (or a stated reason not to)", () => {
  const spec = readFileSync(process.env.ORCA_OPENAPI, "utf8");
  const ids = [...spec.matchAll(/^\s+operationId:\s*(\S+)\s*$/gm)].map((m) => m[1]);
  assert.ok(ids.length > 50, `found ${ids.length} operationIds`);
  const client = new Client({ baseURL: "http://127.0.0.1:1" });
  const missing = ids.filter((id) => !(id in OPERATION_METHODS) && !(id in OPERATIONS_NOT_WRAPPED));
  assert.deepEqual(missing, [], "operations without an SDK method: add them to src/operations.ts");
  for (const [id, method] of Object.entries(OPERATION_METHODS)) {
    assert.ok(ids.includes(id), `${id} is mapped but not in openapi.yaml`);
    const fn = method.split(".").reduce((object, key) => object?.[key], client);
    assert.equal(typeof fn, "function", `${id} -> client.${method} is not a method`);
  }
});

describe("resources", () => {
  let orca;
  let client;
  before(async () => {
    orca = await startOrca({ ORCA_LLM__OFFLINE_TOKEN_DELAY_MS: "10" });
    client = new Client({ baseURL: orca.url, headers: { "x-request-id": "sdk-ts-test" } });
  });
  after(() => orca?.close());

  test("health, ready, metrics", async () => {
    assert.equal(await client.health(), true);
    assert.equal(await client.ready(), true);
    assert.match(await client.metrics(), /^# (HELP|TYPE) /m);
  });

  test("runs: create, get, list, events, steps, plans, checkpoints, timeline, webhook, delete", async () => {
    const created = await client.runs.create({ input: "hello.txt 파일 읽어줘", metadata: { team: "docs" } });
    assert.equal(created.metadata.team, "docs");
    const run = await waitFor("the run to end", async () => {
      const r = await client.runs.get(created.id);
      return TERMINAL.includes(r.status) && r;
    });
    assert.equal(run.id, created.id);
    const listed = await client.runs.list({ status: run.status, metadata: { team: "docs" } }).toArray();
    assert.deepEqual(listed.map((r) => r.id), [run.id]);
    const events = await client.runs.events(run.id);
    assert.equal(events.at(-1).kind, "final");
    assert.deepEqual((await client.runs.events(run.id, { after: 2 })).map((e) => e.seq), events.slice(2).map((e) => e.seq));
    assert.ok((await client.runs.steps(run.id)).length > 0);
    assert.ok(Array.isArray(await client.runs.plans(run.id)));
    const checkpoints = await client.runs.checkpoints(run.id, { limit: 5 });
    assert.ok(Array.isArray(checkpoints));
    const timeline = await client.runs.timeline(run.id);
    assert.equal(typeof timeline, "object");
    const webhook = await client.runs.webhook(run.id).catch((e) => e);
    assert.ok(webhook instanceof NotFoundError || typeof webhook === "object", String(webhook));
    await client.runs.delete(run.id);
    await assert.rejects(client.runs.get(run.id), NotFoundError);
  });

  test("runs: cancel, pause, resume, input, replan, fork", async () => {
    const long = await client.runs.create({ input: words(2000) });
    await waitFor("running", async () => (await client.runs.get(long.id)).status === "running");
    const cancelled = await client.runs.cancel(long.id);
    assert.equal(cancelled.id, long.id);
    await waitFor("cancelled", async () => (await client.runs.get(long.id)).status === "cancelled");
    await assert.rejects(client.runs.cancel(long.id), ConflictError);

    // Pause while step `a` (a slow model answer) runs: it finishes, `b` does not start.
    const plan = {
      steps: [
        { id: "a", kind: "llm", input: { prompt: words(300) } },
        { id: "b", kind: "tool", depends_on: ["a"], input: { tool: "clock.now", arguments: {} } },
      ],
    };
    const slow = await client.runs.create({ input: "x", orchestration: "fixed", plan });
    await waitFor("running", async () => (await client.runs.get(slow.id)).status === "running");
    assert.equal((await client.runs.pause(slow.id)).id, slow.id);
    await waitFor("paused", async () => (await client.runs.get(slow.id)).status === "paused");
    assert.equal((await client.runs.resume(slow.id)).id, slow.id);
    const slowDone = await waitFor("resumed to the end", async () => {
      const r = await client.runs.get(slow.id);
      return TERMINAL.includes(r.status) && r;
    });
    assert.equal(slowDone.status, "succeeded");

    const asking = await client.runs.create({ input: "x", orchestration: "fixed", workflow: askingWorkflow() });
    await waitFor("waiting for input", async () => (await client.runs.get(asking.id)).status === "waiting_input");
    const replan = await client.runs.replan(asking.id, { message: "try again" }).catch((e) => e);
    assert.ok(replan instanceof ConflictError || replan?.id === asking.id, String(replan));
    await client.runs.input(asking.id, { step_id: "ask", value: "Ada" });
    const done = await waitFor("done", async () => {
      const r = await client.runs.get(asking.id);
      return TERMINAL.includes(r.status) && r;
    });
    assert.equal(done.status, "succeeded");
    const fork = await client.runs.fork(done.id, {}, { idempotencyKey: "fork-once" });
    const again = await client.runs.fork(done.id, {}, { idempotencyKey: "fork-once" });
    assert.notEqual(fork.id, done.id);
    assert.equal(again.id, fork.id, "the same Idempotency-Key returns the same fork");
  });

  test("workflows with versions, labels and diff", async () => {
    const first = await client.workflows.put("greet", askingWorkflow("greet"), { message: "v1", author: "sdk" });
    assert.equal(first.name, "greet");
    const second = askingWorkflow("greet");
    second.steps[0].input.prompt = "who are you?";
    await client.workflows.put("greet", second, { message: "v2" });
    assert.ok((await client.workflows.list()).some((w) => w.name === "greet"));
    assert.equal((await client.workflows.get("greet")).name, "greet");
    const versions = await client.workflows.versions.list("greet");
    assert.deepEqual(versions.versions.map((v) => v.version).sort(), [1, 2]);
    const v1 = await client.workflows.versions.get("greet", 1);
    assert.equal(v1.version, 1);
    const label = await client.workflows.labels.set("greet", "prod", 1);
    assert.equal(label.version, 1);
    assert.equal((await client.workflows.versions.get("greet", "prod")).version, 1);
    const diff = await client.workflows.diff("greet", { from: 1, to: 2 });
    assert.ok(JSON.stringify(diff).includes("who are you?"), JSON.stringify(diff).slice(0, 300));
    await client.workflows.labels.delete("greet", "prod");
    await client.workflows.versions.delete("greet", 1);
    assert.deepEqual((await client.workflows.versions.list("greet")).versions.map((v) => v.version), [2]);
    await client.workflows.delete("greet");
    await assert.rejects(client.workflows.get("greet"), NotFoundError);
  });

  test("agents, tools, functions", async () => {
    await client.agents.put("helper", { instructions: "Be brief.", tools: ["math.calculate"] });
    assert.ok((await client.agents.list()).some((a) => a.name === "helper"));
    assert.equal((await client.agents.get("helper")).name, "helper");
    assert.equal((await client.agents.versions.list("helper")).latest_version, 1);
    await client.agents.delete("helper");
    await assert.rejects(client.agents.get("helper"), NotFoundError);

    const tools = await client.tools.list();
    assert.ok(tools.some((t) => t.name === "math.calculate"));
    assert.equal((await client.tools.get("math.calculate")).name, "math.calculate");
    const tool = await client.tools.put("weather.current", { name: "weather.current", url: "https://example.com/weather" });
    assert.equal(tool.name, "weather.current");
    await client.tools.delete("weather.current");
    await assert.rejects(client.tools.get("weather.current"), NotFoundError);

    await client.functions.put("summarise", { name: "summarise", prompt: "Summarise {{input}}" });
    assert.ok((await client.functions.list()).some((f) => f.name === "summarise"));
    assert.equal((await client.functions.get("summarise")).name, "summarise");
    await client.functions.delete("summarise");
    await assert.rejects(client.functions.get("summarise"), NotFoundError);
  });

  test("schedules", async () => {
    const schedule = await client.schedules.create({ name: "nightly", cron: "0 3 * * *", run: { input: "report" }, enabled: false });
    assert.equal((await client.schedules.get(schedule.id)).name, "nightly");
    assert.ok((await client.schedules.list()).schedules.some((s) => s.id === schedule.id));
    const updated = await client.schedules.update(schedule.id, { name: "nightly-2" });
    assert.equal(updated.name, "nightly-2");
    assert.ok(Array.isArray((await client.schedules.fires(schedule.id)).fires));
    await client.schedules.delete(schedule.id);
    await assert.rejects(client.schedules.get(schedule.id), NotFoundError);
  });

  test("sessions", async () => {
    const first = await client.runs.run({ input: "hi there", session_id: "chat-1" });
    assert.equal(first.session_id, "chat-1");
    const listed = await client.sessions.list({ limit: 1 }).toArray();
    assert.ok(listed.some((s) => s.id === "chat-1"));
    assert.equal((await client.sessions.get("chat-1")).id, "chat-1");
    const updated = await client.sessions.update("chat-1", { variables: { user: "ada" } });
    assert.deepEqual(updated.variables, { user: "ada" });
    const history = await client.sessions.history("chat-1");
    assert.ok(JSON.stringify(history).includes("hi there"));
    await client.sessions.delete("chat-1");
    await assert.rejects(client.sessions.get("chat-1"), NotFoundError);
  });

  test("memory and users", async () => {
    const notes = "user/ts-alice/notes";
    const item = await client.memory.put(notes, "tea", "Likes sencha in the morning");
    assert.equal(item.revision, 1);
    assert.equal(item.user_id, "ts-alice");
    assert.equal((await client.memory.get(notes, "tea")).value, "Likes sencha in the morning");
    await client.memory.put(notes, "city", { name: "Lisbon" }, { ttl_seconds: 3600 });
    const listed = await client.memory.list("user/ts-alice", { limit: 1 }).toArray();
    assert.deepEqual(listed.map((i) => i.key), ["city", "tea"]);
    const found = await client.memory.search({ namespace: "user/ts-alice", query: "which sencha in the morning?", mode: "text" });
    assert.equal(found.mode, "text");
    assert.deepEqual(found.items.map((i) => i.key), ["tea"]);
    await client.runs.run({ input: "hi", user_id: "ts-alice", session_id: "ts-alice-s" });
    const exported = await client.users.export("ts-alice");
    assert.equal(exported.runs.length, 1);
    assert.deepEqual(exported.memory.map((i) => i.key), ["city", "tea"]);
    const erased = await client.users.erase("ts-alice");
    assert.deepEqual([erased.runs, erased.sessions, erased.memory_items], [1, 1, 2]);
    await assert.rejects(client.memory.get(notes, "tea"), NotFoundError);
    await client.memory.put("shared/kb", "hours", "9 to 5");
    await client.memory.delete("shared/kb", "hours");
  });

  test("usage, models, definitions export and apply", async () => {
    const usage = await client.usage.get();
    assert.equal(typeof usage.tenant, "string");
    const models = await client.models.list();
    assert.ok(models.length > 0);
    await client.workflows.put("exported", askingWorkflow("exported"));
    const bundle = await client.definitions.export();
    assert.ok(bundle.files.some((f) => f.path.includes("exported")), JSON.stringify(bundle).slice(0, 300));
    const result = await client.definitions.apply({ files: bundle.files, dry_run: true });
    assert.equal(typeof result, "object");
  });
});
