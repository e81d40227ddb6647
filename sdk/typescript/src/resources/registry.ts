/**
 * The versioned registries — `client.workflows`, `.agents`, `.tools`, `.functions` — share one
 * shape: list, get, put (a new version), delete, and under each, `versions`, `labels`, `diff`.
 */
import type { RequestOptions, Transport } from "../transport.js";
import type { Collection, LabelDetail, VersionDetail, VersionDiff, VersionList } from "../types.js";
import { path } from "./path.js";

/** Who and why, stored with the version a `put` makes. */
export interface PutOptions extends RequestOptions {
  message?: string;
  author?: string;
}

/** One registry: `Summary` as listed, `Detail` as read, `Body` as written. */
export class Registry<Summary, Detail, Body> {
  /** `versions.list(name)`, `versions.get(name, version)`, `versions.delete(name, version)`. */
  readonly versions: Versions;
  /** `labels.set(name, label, version)`, `labels.delete(name, label)`. */
  readonly labels: Labels;

  constructor(
    private readonly transport: Transport,
    private readonly collection: Collection,
  ) {
    this.versions = new Versions(transport, collection);
    this.labels = new Labels(transport, collection);
  }

  /** Every entry (the caller's tenant's and the shared ones). */
  list(options?: RequestOptions): Promise<Summary[]> {
    return this.transport.json({ method: "GET", path: `/v1/${this.collection}` }, options);
  }

  /** The latest version of `name`. */
  get(name: string, options?: RequestOptions): Promise<Detail> {
    return this.transport.json({ method: "GET", path: this.item(name) }, options);
  }

  /** Creates or replaces `name` (a new version when it changed); validated in full (422). */
  put(name: string, body: Body, options: PutOptions = {}): Promise<Detail> {
    const { message, author, ...rest } = options;
    return this.transport.json({ method: "PUT", path: this.item(name), body, query: { message, author } }, rest);
  }

  /** Deletes `name` with all its versions. */
  async delete(name: string, options?: RequestOptions): Promise<void> {
    await this.transport.json({ method: "DELETE", path: this.item(name) }, options);
  }

  /** What changed between two versions or labels of `name` (`from`, `to`: a number, label or `latest`). */
  diff(name: string, params: { from?: string | number; to?: string | number } = {}, options?: RequestOptions): Promise<VersionDiff> {
    return this.transport.json({ method: "GET", path: `${this.item(name)}/diff`, query: params }, options);
  }

  private item(name: string): string {
    return `/v1/${this.collection}${path`/${name}`}`;
  }
}

/** The versions of one registry's entries. */
export class Versions {
  constructor(
    private readonly transport: Transport,
    private readonly collection: Collection,
  ) {}

  /** Every version of `name`, with its labels. */
  list(name: string, options?: RequestOptions): Promise<VersionList> {
    return this.transport.json({ method: "GET", path: `/v1/${this.collection}${path`/${name}/versions`}` }, options);
  }

  /** One version: a number, a label or `latest`. */
  get(name: string, version: string | number, options?: RequestOptions): Promise<VersionDetail> {
    return this.transport.json(
      { method: "GET", path: `/v1/${this.collection}${path`/${name}/versions/${version}`}` },
      options,
    );
  }

  /** Deletes one version (409 while a label points at it, or when it is the only one). */
  async delete(name: string, version: number, options?: RequestOptions): Promise<void> {
    await this.transport.json(
      { method: "DELETE", path: `/v1/${this.collection}${path`/${name}/versions/${version}`}` },
      options,
    );
  }
}

/** Labels (names such as `prod`) that point at a version. */
export class Labels {
  constructor(
    private readonly transport: Transport,
    private readonly collection: Collection,
  ) {}

  /** Points `label` at `version` of `name`. */
  set(name: string, label: string, version: number, options?: RequestOptions): Promise<LabelDetail> {
    return this.transport.json(
      { method: "PUT", path: `/v1/${this.collection}${path`/${name}/labels/${label}`}`, body: { version } },
      options,
    );
  }

  /** Removes `label` from `name`. */
  async delete(name: string, label: string, options?: RequestOptions): Promise<void> {
    await this.transport.json(
      { method: "DELETE", path: `/v1/${this.collection}${path`/${name}/labels/${label}`}` },
      options,
    );
  }
}
