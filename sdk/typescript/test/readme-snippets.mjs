// Writes readme.ts next to this file from the ```ts blocks of the SDK's README (path in argv[2]),
// each block in a function of its own, so `tsc` checks the README's examples against the
// installed package's types; with the main README's path in argv[3], also walkthrough.ts from
// its "### The same in TypeScript" block (a module as printed), when it has one. Imports are lifted to the top; what the examples leave to the
// reader (an id, a signal, your own fetch...) is declared in the prelude.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const readme = readFileSync(process.argv[2], "utf8");
const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
const imports = new Set();
const bodies = blocks.map((block, i) => {
  const lines = block.split("\n").filter((line) => {
    if (!line.startsWith("import ")) return true;
    imports.add(line);
    return false;
  });
  return `export async function readmeBlock${i}() {\n${lines.join("\n")}\n}\n`;
});
const prelude = `
import { Client as ReadmeClient, type FetchLike } from "@orca/client";
declare const process: { stdout: { write(text: string): void } };
declare const client: ReadmeClient;
declare const id: string;
declare const signal: AbortSignal;
declare const myFetch: FetchLike;
declare function askTheUser(prompt: string): Promise<string>;
`;
const out = [...imports].join("\n") + "\n" + prelude + "\n" + bodies.join("\n");
writeFileSync(join(dirname(fileURLToPath(import.meta.url)), "readme.ts"), out);
console.log(`readme.ts: ${blocks.length} blocks`);

if (process.argv[3]) {
  const { walkThroughBlock, HEADING } = await import("./harness.mjs");
  const walk = walkThroughBlock(process.argv[3]);
  if (walk) {
    writeFileSync(join(dirname(fileURLToPath(import.meta.url)), "walkthrough.ts"), walk);
    console.log(`walkthrough.ts: the main README's "${HEADING}" block`);
  } else {
    console.log(`the main README has no "${HEADING}" block (yet)`);
  }
}
