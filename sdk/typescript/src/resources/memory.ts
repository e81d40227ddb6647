/** `client.memory` and `client.users`: memory beyond one session, and a user's data whole. */
import { Paginator } from "../pagination.js";
import type { RequestOptions, Transport } from "../transport.js";
import type { MemoryItem, MemoryList, PutItem, SearchBody, SearchResult, UserErased, UserExport } from "../types.js";
import { path } from "./path.js";

/** A memory namespace as a path: each segment percent-encoded, joined by `/`. */
function itemPath(namespace: string, key: string): string {
  const segments = namespace.split("/").map((s) => encodeURIComponent(s));
  return `/v1/memory/${segments.join("/")}/${encodeURIComponent(key)}`;
}

export class Memory {
  constructor(private readonly transport: Transport) {}

  /** Stores `value` (any JSON) under `key` in `namespace`, replacing what was there. */
  put(namespace: string, key: string, value: unknown, opts: { ttl_seconds?: number } = {}, options?: RequestOptions): Promise<MemoryItem> {
    const body: PutItem = { value, ...opts };
    return this.transport.json({ method: "PUT", path: itemPath(namespace, key), body }, options);
  }

  get(namespace: string, key: string, options?: RequestOptions): Promise<MemoryItem> {
    return this.transport.json({ method: "GET", path: itemPath(namespace, key) }, options);
  }

  async delete(namespace: string, key: string, options?: RequestOptions): Promise<void> {
    await this.transport.json({ method: "DELETE", path: itemPath(namespace, key) }, options);
  }

  /** The items of `namespace` and those below it, page by page as iterated. */
  list(namespace: string, params: { key_prefix?: string; limit?: number } = {}, options?: RequestOptions): Paginator<MemoryItem> {
    return new Paginator(async (cursor) => {
      const page = await this.transport.json<MemoryList>(
        { method: "GET", path: "/v1/memory", query: { namespace, ...params, cursor } },
        options,
      );
      return { items: page.items, nextCursor: page.next_cursor };
    });
  }

  /** The items closest to `query`, best first (`mode`: `auto`, `text` or `meaning`). */
  search(body: SearchBody, options?: RequestOptions): Promise<SearchResult> {
    return this.transport.json({ method: "POST", path: "/v1/memory/search", body }, options);
  }
}

export class Users {
  constructor(private readonly transport: Transport) {}

  /** Everything kept of the user: runs, the sessions of those runs, memory. */
  export(id: string, options?: RequestOptions): Promise<UserExport> {
    return this.transport.json({ method: "GET", path: path`/v1/users/${id}/export` }, options);
  }

  /** Erases the user's runs, sessions and memory in one transaction (409 while a run of theirs is unfinished). */
  erase(id: string, options?: RequestOptions): Promise<UserErased> {
    return this.transport.json({ method: "DELETE", path: path`/v1/users/${id}` }, options);
  }
}
