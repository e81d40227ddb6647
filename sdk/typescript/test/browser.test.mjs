// The installed package in a real browser (headless Chromium): a page imports dist/index.js as
// an ES module, streams a run from orca (cross-origin, with CORS allowed) and posts back what it
// saw. Skipped, saying so, when no Chromium is found (CHROMIUM, or chromium on PATH).
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { freePort, startOrca, waitFor } from "./harness.mjs";

function findChromium() {
  if (process.env.CHROMIUM) return process.env.CHROMIUM;
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
    const found = spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).stdout.trim();
    if (found) return found;
  }
  return undefined;
}

const chromium = findChromium();

// In CI (CI set) a missing Chromium fails the test: .ci/setup installs it there.
const skip = !chromium && !process.env.CI && "no Chromium found";

test("in a browser: the page streams a run through the installed package", { skip }, async () => {
  assert.ok(chromium, "no Chromium found (CHROMIUM, or chromium on PATH)");
  const dist = dirname(fileURLToPath(import.meta.resolve("@orca/client")));
  const pagePort = await freePort();
  const origin = `http://127.0.0.1:${pagePort}`;
  const orca = await startOrca({ ORCA_SERVER__CORS__ALLOWED_ORIGINS: JSON.stringify([origin]) });
  let result;
  const page = `<!doctype html><script type="module">
    import { Client } from "/dist/index.js";
    const report = (body) => fetch("/result", { method: "POST", body: JSON.stringify(body) });
    try {
      const client = new Client({ baseURL: ${JSON.stringify(orca.url)} });
      const stream = client.runs.stream({ input: "10 + 20 계산해줘" });
      const seqs = [], kinds = [];
      for await (const event of stream) { seqs.push(event.seq); kinds.push(event.kind); }
      const run = await stream.finalRun();
      await report({ seqs, kinds, status: run.status, output: run.output, id: run.id });
    } catch (error) {
      await report({ error: String(error) });
    }
  </script>`;
  const server = http.createServer((req, res) => {
    if (req.method === "POST" && req.url === "/result") {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        result = JSON.parse(body);
        res.end();
      });
      return;
    }
    if (req.url.startsWith("/dist/")) {
      const file = normalize(join(dist, req.url.slice("/dist/".length)));
      if (!file.startsWith(dist)) return res.writeHead(403).end();
      try {
        res.writeHead(200, { "content-type": "text/javascript" }).end(readFileSync(file));
      } catch {
        res.writeHead(404).end();
      }
      return;
    }
    res.writeHead(200, { "content-type": "text/html" }).end(page);
  });
  await new Promise((resolve) => server.listen(pagePort, "127.0.0.1", resolve));
  const profile = mkdtempSync(join(tmpdir(), "orca-ts-chromium-"));
  const browser = spawn(
    chromium,
    ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", `--user-data-dir=${profile}`, `${origin}/`],
    { stdio: "ignore" },
  );
  const exited = new Promise((resolve) => browser.once("exit", resolve));
  try {
    await waitFor("the page to report", () => result, 30_000);
    assert.equal(result.error, undefined, result.error);
    assert.equal(result.status, "succeeded");
    assert.match(String(result.output), /30/);
    assert.deepEqual(result.seqs, result.seqs.map((_, i) => i + 1));
    assert.equal(result.kinds.at(-1), "final");
    assert.ok(result.kinds.includes("tool_call"));
  } finally {
    // SIGTERM lets Chromium take its helper processes down with it; SIGKILL if it lingers.
    browser.kill("SIGTERM");
    const timer = setTimeout(() => browser.kill("SIGKILL"), 5_000);
    await exited;
    clearTimeout(timer);
    await new Promise((resolve) => server.close(resolve));
    await orca.close();
    rmSync(profile, { recursive: true, force: true });
  }
});
