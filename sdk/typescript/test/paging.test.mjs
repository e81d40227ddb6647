// Paging over 250 runs with a filter: the iterator walks every page lazily, the filter sent on
// every page, each run once.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "@orca/client";
import { recordingFetch, startOrca } from "./harness.mjs";

let orca;
before(async () => {
  orca = await startOrca();
});
after(() => orca?.close());

test("runs.list pages over 250 runs, half matching q=, filters kept on every page", async () => {
  const setup = new Client({ baseURL: orca.url });
  const created = { alpha: new Set(), beta: new Set() };
  for (let batch = 0; batch < 10; batch++) {
    const runs = await Promise.all(
      Array.from({ length: 25 }, (_, i) => {
        const n = batch * 25 + i;
        const group = n % 2 === 0 ? "alpha" : "beta";
        return setup.runs
          .create({ input: `${group} number ${n}`, orchestration: "simple", metadata: { group } })
          .then((run) => created[group].add(run.id));
      }),
    );
    assert.equal(runs.length, 25);
  }
  assert.equal(created.alpha.size + created.beta.size, 250);

  const { fetch, calls } = recordingFetch();
  const client = new Client({ baseURL: orca.url, fetch });
  const pages = client.runs.list({ q: "alpha", limit: 20 });
  assert.equal(calls.length, 0, "nothing fetched before iterating");
  const seen = [];
  for await (const run of pages) {
    assert.match(String(run.input), /^alpha number/);
    seen.push(run.id);
  }
  assert.equal(seen.length, 125);
  assert.deepEqual(new Set(seen), created.alpha);
  assert.equal(calls.length, 7, "ceil(125 / 20) pages");
  for (const [i, call] of calls.entries()) {
    const url = new URL(call.url);
    assert.equal(url.searchParams.get("q"), "alpha", `page ${i} kept q`);
    assert.equal(url.searchParams.get("limit"), "20", `page ${i} kept limit`);
    assert.equal(url.searchParams.has("cursor"), i > 0, `page ${i} cursor`);
  }

  // Stopping early fetches no further page; metadata filters travel as metadata.KEY=VALUE.
  const firstPage = [];
  const before = calls.length;
  for await (const run of client.runs.list({ metadata: { group: "beta" }, limit: 50 })) {
    firstPage.push(run);
    if (firstPage.length === 10) break;
  }
  assert.equal(calls.length, before + 1);
  assert.equal(new URL(calls.at(-1).url).searchParams.get("metadata.group"), "beta");
  assert.ok(firstPage.every((run) => run.metadata.group === "beta"));
  const all = await setup.runs.list({ limit: 200 }).toArray();
  assert.equal(all.length, 250);
});
