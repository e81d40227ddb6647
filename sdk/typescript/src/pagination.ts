/**
 * Lazy paging over `next_cursor` lists: `for await (const run of client.runs.list({...}))`
 * fetches one page at a time, with the same filters on every page.
 */

/** Fetches one page: the items and the cursor of the next page (null/undefined at the end). */
export type PageFetcher<T> = (cursor: string | undefined) => Promise<{ items: T[]; nextCursor: string | null | undefined }>;

/** Every item of every page, fetched as iterated. */
export class Paginator<T> implements AsyncIterable<T> {
  constructor(private readonly fetchPage: PageFetcher<T>) {}

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for await (const page of this.pages()) yield* page;
  }

  /** The pages themselves, each an array of items. */
  async *pages(): AsyncGenerator<T[]> {
    let cursor: string | undefined;
    do {
      const page = await this.fetchPage(cursor);
      yield page.items;
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
  }

  /** Collects every item into an array (fetching every page). */
  async toArray(): Promise<T[]> {
    const all: T[] = [];
    for await (const item of this) all.push(item);
    return all;
  }
}
