// The main README's walk-through in TypeScript (the ```ts block under "### The same in
// TypeScript") runs as printed against a real server, from the installed package. ORCA_README
// overrides the README's path.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";
import { HEADING, startOrca, walkThroughBlock } from "./harness.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const readmePath = process.env.ORCA_README ?? join(here, "../../../README.md");
const block = walkThroughBlock(readmePath);

test("the README's TypeScript walk-through runs as printed", async () => {
  assert.ok(block, `no "${HEADING}" block in ${readmePath}`);
  assert.ok(block.includes("http://127.0.0.1:8080"));
  const orca = await startOrca();
  // The walk-through's shell line: `mkdir -p workspace && echo ... > workspace/hello.txt`.
  mkdirSync(join(orca.dir, "workspace"), { recursive: true });
  writeFileSync(join(orca.dir, "workspace/hello.txt"), "Hello from the workspace\n");
  // Next to the tests, so `@orca/client` resolves to the installed package. (TypeScript syntax
  // the block may use is type-only; it is written to run as JavaScript too.)
  const script = join(here, "walkthrough.run.mjs");
  writeFileSync(script, block.replaceAll("http://127.0.0.1:8080", orca.url));
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [script], { timeout: 60_000 });
    const lines = stdout.trim().split("\n");
    assert.ok(lines.includes("The result is 30."), lines.join("\n"));
    assert.equal(lines.at(-1), "cancelled");
    assert.ok(lines.some((line) => line.endsWith(" succeeded")), "the listed run");
    const joined = lines.filter((line) => /^\d+ \w+$/.test(line));
    assert.ok(joined.length > 0 && joined[0].startsWith("4 "), "join after 3 starts at event 4");
  } finally {
    rmSync(script, { force: true });
    await orca.close();
  }
});
