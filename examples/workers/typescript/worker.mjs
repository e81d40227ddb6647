// A worker serving two tools of the queue `demo`: declares them, then runs until SIGTERM/SIGINT.
//   npm install @orca/client   (or the packed tarball of sdk/typescript)
//   ORCA_URL=http://127.0.0.1:8080 node worker.mjs
import { Client } from "@orca/client";
import { Worker } from "@orca/client/worker";

const text = { type: "object", properties: { text: { type: "string" } }, required: ["text"], additionalProperties: false };
const worker = new Worker(new Client(), { queue: "demo", concurrency: 4 });

worker.tool({ name: "demo.slugify", description: "Turn a text into a URL slug", inputSchema: text }, ({ text }) => ({
  slug: text.toLowerCase().normalize("NFKD").replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, ""),
}));
worker.tool({ name: "demo.count_words", description: "Count the words of a text", inputSchema: text }, ({ text }) => ({
  words: text.split(/\s+/).filter(Boolean).length,
}));

await worker.declare();
console.log(`worker ${worker.workerId} serving ${worker.toolNames.join(", ")}`);
await worker.run();
