// Errors and retries against a real server: a 422 with its pointers, a 429 whose Retry-After
// the client honours (timed through a recording fetch), auth, connection errors.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import net from "node:net";
import {
  APIConnectionError,
  APIError,
  APITimeoutError,
  AuthenticationError,
  Client,
  ConflictError,
  NotFoundError,
  OrcaError,
  RateLimitedError,
  UnprocessableEntityError,
} from "@orca/client";
import { freePort, recordingFetch, startOrca, waitFor, words } from "./harness.mjs";

describe("errors", () => {
  let orca;
  before(async () => {
    orca = await startOrca();
  });
  after(() => orca?.close());

  test("a 422 is an UnprocessableEntityError carrying every pointer", async () => {
    const client = new Client({ baseURL: orca.url });
    const error = await client.runs.create({ input: 5, orchestration: "sideways" }).catch((e) => e);
    assert.ok(error instanceof UnprocessableEntityError, String(error));
    assert.ok(error instanceof APIError && error instanceof OrcaError);
    assert.equal(error.status, 422);
    assert.equal(error.code, "validation_failed");
    assert.equal(error.title, "Validation failed");
    const pointers = error.errors.map((e) => e.pointer).sort();
    assert.deepEqual(pointers, ["/input", "/orchestration"]);
    assert.ok(error.errors.every((e) => e.message.length > 0));
    assert.equal(error.problem?.status, 422);
  });

  test("a 422 from a registry put points into the body", async () => {
    const client = new Client({ baseURL: orca.url });
    const error = await client.workflows.put("bad", { steps: [{ id: "a", kind: "nope", input: {} }] }).catch((e) => e);
    assert.ok(error instanceof UnprocessableEntityError, String(error));
    assert.ok(error.errors.some((e) => e.pointer.startsWith("/steps/0")), JSON.stringify(error.errors));
  });

  test("404 and 409 map to NotFoundError and ConflictError", async () => {
    const client = new Client({ baseURL: orca.url });
    const missing = await client.runs.get("01a00000-0000-7000-8000-000000000000").catch((e) => e);
    assert.ok(missing instanceof NotFoundError, String(missing));
    assert.equal(missing.code, "not_found");
    const run = await client.runs.run({ input: "hi" });
    const conflict = await client.runs.cancel(run.id).catch((e) => e);
    assert.ok(conflict instanceof ConflictError, String(conflict));
    assert.equal(conflict.status, 409);
  });

  test("a refused connection is retried, then an APIConnectionError", async () => {
    const { fetch, calls } = recordingFetch();
    const client = new Client({ baseURL: `http://127.0.0.1:${await freePort()}`, fetch, maxRetries: 2 });
    const error = await client.runs.get("x").catch((e) => e);
    assert.ok(error instanceof APIConnectionError, String(error));
    assert.equal(calls.length, 3, "one call and two retries");
    const none = new Client({ baseURL: `http://127.0.0.1:${await freePort()}`, fetch, maxRetries: 0 });
    await assert.rejects(none.models.list(), APIConnectionError);
    assert.equal(calls.length, 4, "maxRetries 0 disables retries");
  });
});

test("a server that never answers is an APITimeoutError after `timeout`, retried on a GET", async () => {
  const held = new Set();
  const silent = net.createServer((socket) => held.add(socket)); // accepts, never answers
  await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
  try {
    const { fetch, calls } = recordingFetch();
    const client = new Client({ baseURL: `http://127.0.0.1:${silent.address().port}`, fetch, timeout: 300, maxRetries: 1 });
    const started = Date.now();
    const error = await client.runs.get("x").catch((e) => e);
    assert.ok(error instanceof APITimeoutError, String(error));
    assert.ok(error instanceof APIConnectionError);
    assert.equal(calls.length, 2, "the GET was retried once");
    assert.ok(Date.now() - started >= 600, "each attempt waited its 300 ms");
    const post = await client.schedules.create({ run: { input: "x" }, cron: "0 3 * * *" }).catch((e) => e);
    assert.ok(post instanceof APITimeoutError, String(post));
    assert.equal(calls.length, 3, "a POST without an Idempotency-Key is not retried");
  } finally {
    for (const socket of held) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  }
});

describe("authentication", () => {
  let orca;
  before(async () => {
    orca = await startOrca({ ORCA_AUTH__API_KEYS: '[{ key = "sdk-test-key-0123456789", tenant = "t1" }]' });
  });
  after(() => orca?.close());

  test("the key goes as a Bearer token, from the argument or ORCA_API_KEY; none is a 401", async () => {
    const anonymous = new Client({ baseURL: orca.url });
    const error = await anonymous.models.list().catch((e) => e);
    assert.ok(error instanceof AuthenticationError, String(error));
    const keyed = new Client({ baseURL: orca.url, apiKey: "sdk-test-key-0123456789" });
    assert.ok(Array.isArray(await keyed.models.list()));
    process.env.ORCA_API_KEY = "sdk-test-key-0123456789";
    process.env.ORCA_URL = orca.url;
    try {
      const fromEnv = new Client();
      assert.equal(fromEnv.baseURL, orca.url);
      assert.equal((await fromEnv.usage.get()).tenant, "t1");
    } finally {
      delete process.env.ORCA_API_KEY;
      delete process.env.ORCA_URL;
    }
  });
});

describe("429 and Retry-After", () => {
  let orca;
  before(async () => {
    orca = await startOrca({ ORCA_QUOTAS__DEFAULT__RUNNING_RUNS: "1", ORCA_LLM__OFFLINE_TOKEN_DELAY_MS: "20" });
  });
  after(() => orca?.close());

  test("a create refused with 429 waits Retry-After, then retries with the same Idempotency-Key", async () => {
    const admin = new Client({ baseURL: orca.url, maxRetries: 0 });
    const busy = await admin.runs.create({ input: words(3000) });
    await waitFor("the first run to hold the running slot", async () => (await admin.runs.get(busy.id)).status === "running");

    // Without retries: the error carries the quota code and Retry-After.
    const refused = await admin.runs.create({ input: "second" }).catch((e) => e);
    assert.ok(refused instanceof RateLimitedError, String(refused));
    assert.equal(refused.code, "quota_exceeded");
    assert.ok(refused.retryAfter > 0, `retryAfter ${refused.retryAfter}`);

    // With retries: the first attempt is refused; once seen, the slot is freed (the busy run
    // cancelled) and the retry, sent no earlier than Retry-After, succeeds.
    const { fetch: record, calls } = recordingFetch();
    const fetch = async (url, init) => {
      const response = await record(url, init);
      if (response.status === 429) await admin.runs.cancel(busy.id);
      return response;
    };
    const client = new Client({ baseURL: orca.url, fetch, maxRetries: 2 });
    const run = await client.runs.create({ input: "third" });
    const posts = calls.filter((c) => c.method === "POST");
    assert.deepEqual(posts.map((c) => c.status), [429, 201]);
    const retryAfter = Number(posts[0].headers.get("retry-after"));
    assert.ok(retryAfter >= 1, `Retry-After ${retryAfter}`);
    const waited = posts[1].at - posts[0].at;
    assert.ok(waited >= retryAfter * 1000 - 50, `waited ${waited} ms, Retry-After ${retryAfter} s`);
    assert.ok(waited < retryAfter * 1000 + 3000, `waited ${waited} ms: far longer than Retry-After`);
    const keys = posts.map((c) => c.requestHeaders["idempotency-key"]);
    assert.ok(keys[0] && keys[0] === keys[1], `same Idempotency-Key on the retry: ${keys}`);
    assert.equal((await client.runs.get(run.id)).input, "third");
  });
});
