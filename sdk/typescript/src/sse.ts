/**
 * A Server-Sent Events reader over a fetch body (a web ReadableStream, so it runs in browsers
 * and Node alike): yields one message per blank-line-terminated block, skips comments.
 */
import { APIConnectionError } from "./errors.js";

/** One SSE message as framed on the wire. */
export interface SSEMessage {
  id: string | undefined;
  event: string;
  data: string;
}

/** No byte arrived for longer than the idle timeout (orca sends a keep-alive every 15 s). */
export class StreamIdleError extends APIConnectionError {}

/**
 * Yields the messages of `body`. Throws {@link StreamIdleError} when nothing (not even a
 * keep-alive comment) arrives for `idleTimeoutMs`; other read failures propagate as thrown by
 * fetch (a dropped connection). Returning early cancels the body.
 */
export async function* readSSE(
  body: ReadableStream<Uint8Array>,
  idleTimeoutMs: number,
): AsyncGenerator<SSEMessage> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let message = emptyMessage();
  try {
    for (;;) {
      const { done, value } = await readWithin(reader, idleTimeoutMs);
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        // A lone "\r" at the end of the buffer may be the first half of "\r\n": wait for more.
        if (buffer[newline] === "\r" && newline === buffer.length - 1) break;
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
        if (line === "") {
          if (message.dataLines.length > 0) {
            yield { id: message.id, event: message.event || "message", data: message.dataLines.join("\n") };
          }
          message = emptyMessage();
          continue;
        }
        applyField(message, line);
      }
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

interface PendingMessage {
  id: string | undefined;
  event: string;
  dataLines: string[];
}

function emptyMessage(): PendingMessage {
  return { id: undefined, event: "", dataLines: [] };
}

/** One `field: value` line (or a `:` comment, ignored) into the message being built. */
function applyField(message: PendingMessage, line: string): void {
  if (line.startsWith(":")) return;
  const colon = line.indexOf(":");
  const field = colon < 0 ? line : line.slice(0, colon);
  let value = colon < 0 ? "" : line.slice(colon + 1);
  if (value.startsWith(" ")) value = value.slice(1);
  if (field === "data") message.dataLines.push(value);
  else if (field === "event") message.event = value;
  else if (field === "id") message.id = value;
}

/** reader.read(), failing with {@link StreamIdleError} after `ms` without data. */
async function readWithin(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  ms: number,
): Promise<ReadableStreamReadResult<Uint8Array>> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const idle = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StreamIdleError(`no data on the stream for ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([reader.read(), idle]);
  } finally {
    clearTimeout(timer);
  }
}
