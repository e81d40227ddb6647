/** `client.sessions`: conversations whose runs share history. */
import { Paginator } from "../pagination.js";
import type { RequestOptions, Transport } from "../transport.js";
import type { QueryOf, Session, SessionHistory, SessionList, SessionListItem, UpdateSession } from "../types.js";
import { path } from "./path.js";

export class Sessions {
  constructor(private readonly transport: Transport) {}

  /** Every session, fetched page by page as iterated (`limit` is the page size). */
  list(params: QueryOf<"list_sessions"> = {}, options?: RequestOptions): Paginator<SessionListItem> {
    return new Paginator(async (cursor) => {
      const page = await this.transport.json<SessionList>(
        { method: "GET", path: "/v1/sessions", query: { ...params, cursor } },
        options,
      );
      return { items: page.sessions, nextCursor: page.next_cursor };
    });
  }

  get(id: string, options?: RequestOptions): Promise<Session> {
    return this.transport.json({ method: "GET", path: path`/v1/sessions/${id}` }, options);
  }

  /** Replaces the session's variables (PATCH). */
  update(id: string, body: UpdateSession, options?: RequestOptions): Promise<Session> {
    return this.transport.json({ method: "PATCH", path: path`/v1/sessions/${id}`, body }, options);
  }

  async delete(id: string, options?: RequestOptions): Promise<void> {
    await this.transport.json({ method: "DELETE", path: path`/v1/sessions/${id}` }, options);
  }

  /** The conversation: every run's turns. */
  history(id: string, options?: RequestOptions): Promise<SessionHistory> {
    return this.transport.json({ method: "GET", path: path`/v1/sessions/${id}/history` }, options);
  }
}
