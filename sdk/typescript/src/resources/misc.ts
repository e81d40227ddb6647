/** Small resources: `client.usage`, `client.models`, `client.definitions`. */
import type { RequestOptions, Transport } from "../transport.js";
import type { ApplyRequest, ApplyResult, Bundle, ModelInfo, TenantUsage } from "../types.js";

export class UsageResource {
  constructor(private readonly transport: Transport) {}

  /** The caller's tenant: what it uses and its quota. */
  get(options?: RequestOptions): Promise<TenantUsage> {
    return this.transport.json({ method: "GET", path: "/v1/usage" }, options);
  }
}

export class Models {
  constructor(private readonly transport: Transport) {}

  /** The configured model aliases. */
  list(options?: RequestOptions): Promise<ModelInfo[]> {
    return this.transport.json({ method: "GET", path: "/v1/models" }, options);
  }
}

/** Definitions as code: a folder of workflows, agents, tools, functions and schedules. */
export class Definitions {
  constructor(private readonly transport: Transport) {}

  /** Applies a bundle of files in one transaction (`dry_run` to only see the changes). */
  apply(body: ApplyRequest, options?: RequestOptions): Promise<ApplyResult> {
    return this.transport.json({ method: "POST", path: "/v1/apply", body }, options);
  }

  /** Every definition as a bundle of files (what `apply` takes back). */
  export(options?: RequestOptions): Promise<Bundle> {
    return this.transport.json({ method: "GET", path: "/v1/export" }, options);
  }
}
