// Test harness: a real `orca serve` per test file (random loopback port, temp dir as cwd, temp
// SQLite database, the offline model), a TCP proxy that can cut streams, and wait-until helpers.
// No sleeps for synchronisation: everything waits on a condition with a deadline.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const BIN = process.env.ORCA_BIN;

/** A free loopback TCP port (bound then released). */
export async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Polls `check` until it returns a truthy value, or fails after `ms` with `what`. */
export async function waitFor(what, check, ms = 20_000, everyMs = 25) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** The environment for the server: ours minus anything that would point orca elsewhere. */
function serverEnv(extra) {
  const env = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (/^(ORCA_|OPENAI_|DATABASE_URL$|RUST_LOG$)/.test(key)) continue;
    env[key] = value;
  }
  return { ...env, ORCA_LLM__PROVIDER: "offline", ORCA_LLM__OFFLINE_TOKEN_DELAY_MS: "0", ORCA_TOOLS__HTTP_API: "true", ...extra };
}

/**
 * Starts `orca serve` and waits for GET /readyz = 200. Returns a handle with `url`, `stop()`
 * (SIGTERM), `kill()` (SIGKILL), `restart()` (same port and database), `close()` (stop + rm).
 */
export async function startOrca(env = {}) {
  if (!BIN) throw new Error("set ORCA_BIN to the orca binary");
  const dir = mkdtempSync(join(tmpdir(), "orca-ts-sdk-"));
  const port = await freePort();
  const handle = {
    url: `http://127.0.0.1:${port}`,
    port,
    dir,
    proc: undefined,
    log: "",
    async start() {
      const proc = spawn(
        BIN,
        ["serve", "--bind", `127.0.0.1:${port}`, "--database-url", `sqlite://${join(dir, "orca.db")}`],
        { cwd: dir, env: serverEnv(env), stdio: ["ignore", "pipe", "pipe"] },
      );
      handle.proc = proc;
      // Never leave a server behind, even when the test process is killed or exits early.
      const reap = () => proc.kill("SIGKILL");
      process.once("exit", reap);
      proc.once("exit", () => process.off("exit", reap));
      proc.exited = new Promise((resolve) => proc.once("exit", (code, signal) => resolve({ code, signal })));
      const keep = (chunk) => {
        handle.log = (handle.log + chunk).slice(-20_000);
      };
      proc.stdout.on("data", keep);
      proc.stderr.on("data", keep);
      let exited = false;
      proc.exited.then(() => (exited = true));
      await waitFor(`orca on ${handle.url} to be ready`, async () => {
        if (exited) throw new Error(`orca exited before ready:\n${handle.log}`);
        try {
          const response = await fetch(`${handle.url}/readyz`);
          await response.arrayBuffer();
          return response.status === 200;
        } catch {
          return false;
        }
      });
    },
    async signal(name) {
      const proc = handle.proc;
      if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill(name);
      await proc.exited;
    },
    stop: () => handle.signal("SIGTERM"),
    kill: () => handle.signal("SIGKILL"),
    async restart() {
      await handle.kill();
      await handle.start();
    },
    async close() {
      await handle.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await handle.start();
  return handle;
}

/**
 * A TCP proxy in front of `port`. Each of the first `cuts.length` connections whose response is
 * an event stream is closed once it has carried `cuts[i]` bytes of response; everything else
 * passes through. `cutCount` says how many cuts happened.
 */
export async function cuttingProxy(port, cuts) {
  const pending = [...cuts];
  const sockets = new Set();
  const proxy = { cutCount: 0, port: 0, url: "" };
  const server = net.createServer((client) => {
    const upstream = net.connect(port, "127.0.0.1");
    sockets.add(client);
    sockets.add(upstream);
    let seen = 0;
    let limit;
    client.on("data", (data) => upstream.write(data));
    upstream.on("data", (data) => {
      if (limit === undefined && data.includes("text/event-stream") && pending.length > 0) {
        limit = pending.shift();
        seen = 0;
      }
      if (limit !== undefined && seen + data.length >= limit) {
        client.write(data.subarray(0, Math.max(0, limit - seen)));
        proxy.cutCount++;
        client.destroy();
        upstream.destroy();
        return;
      }
      seen += data.length;
      client.write(data);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("close", end);
    upstream.on("close", end);
    client.on("error", end);
    upstream.on("error", end);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  proxy.port = server.address().port;
  proxy.url = `http://127.0.0.1:${proxy.port}`;
  proxy.close = async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  };
  return proxy;
}

/** A fetch that records every call: {method, url, status, headers, at (ms)}. */
export function recordingFetch() {
  const calls = [];
  const wrapped = async (url, init) => {
    const call = { method: init?.method ?? "GET", url: String(url), requestHeaders: init?.headers ?? {}, at: Date.now() };
    calls.push(call);
    const response = await fetch(url, init);
    call.status = response.status;
    call.headers = response.headers;
    return response;
  };
  return { fetch: wrapped, calls };
}

/** A fixed workflow that asks for a name (a string) and then greets it through the model. */
export function askingWorkflow(name = "ask") {
  return {
    name,
    steps: [
      { id: "ask", kind: "user_input", input: { prompt: "your name?", schema: { type: "string" } } },
      { id: "greet", kind: "llm", depends_on: ["ask"], input: { prompt: "hello {{steps.ask.output}}" } },
    ],
  };
}

/** An input the offline model echoes word by word: `n` words, so `n` token events or so. */
export function words(n, word = "word") {
  return Array.from({ length: n }, (_, i) => `${word}${i}`).join(" ");
}

/** The heading of the main README's TypeScript walk-through. */
export const HEADING = "### The same in TypeScript";

/** The first ```ts block after the heading, or undefined when the README has none. */
export function walkThroughBlock(path) {
  if (!existsSync(path)) return undefined;
  const text = readFileSync(path, "utf8");
  const at = text.indexOf(HEADING);
  if (at < 0) return undefined;
  return /```ts\n([\s\S]*?)```/.exec(text.slice(at))?.[1];
}

