/** `client.schedules`: runs started on a cron or an interval. */
import type { RequestOptions, Transport } from "../transport.js";
import type { CreateSchedule, Schedule, ScheduleFires, ScheduleList, UpdateSchedule } from "../types.js";
import { path } from "./path.js";

export class Schedules {
  constructor(private readonly transport: Transport) {}

  /** Every schedule (`{schedules: [...]}`). */
  list(options?: RequestOptions): Promise<ScheduleList> {
    return this.transport.json({ method: "GET", path: "/v1/schedules" }, options);
  }

  /** Creates a schedule (not retried: a POST without an idempotency key). */
  create(body: CreateSchedule, options?: RequestOptions): Promise<Schedule> {
    return this.transport.json({ method: "POST", path: "/v1/schedules", body }, options);
  }

  get(id: string, options?: RequestOptions): Promise<Schedule> {
    return this.transport.json({ method: "GET", path: path`/v1/schedules/${id}` }, options);
  }

  /** Changes some of its fields (PATCH). */
  update(id: string, body: UpdateSchedule, options?: RequestOptions): Promise<Schedule> {
    return this.transport.json({ method: "PATCH", path: path`/v1/schedules/${id}`, body }, options);
  }

  async delete(id: string, options?: RequestOptions): Promise<void> {
    await this.transport.json({ method: "DELETE", path: path`/v1/schedules/${id}` }, options);
  }

  /** Its recent fires and the runs they started. */
  fires(id: string, options?: RequestOptions): Promise<ScheduleFires> {
    return this.transport.json({ method: "GET", path: path`/v1/schedules/${id}/fires` }, options);
  }
}
