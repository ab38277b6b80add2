/**
 * Kubernetes Events through events.k8s.io/v1, as controller-runtime's recorder writes them:
 * `regarding` the object, `reason` (UpperCamelCase), `action`, `note`, `type` Normal or Warning,
 * `reportingController` and `reportingInstance`. Recording never blocks a reconcile and never
 * throws: {@link EventRecorder.record} queues the write and returns at once; at most
 * {@link EVENT_WRITERS} writes are in flight and at most {@link EVENT_QUEUE_LIMIT} wait (more are
 * dropped, as client-go's broadcaster drops past its buffer of 1,000). An identical event (same
 * object, reason and note) within {@link EVENT_DEDUPE_MS} is not written again, so a retry loop
 * does not flood the apiserver.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { EVENTS } from "../kube/resources.ts";
import { microTime } from "./leader.ts";

/** Window in which an identical event is written only once (ms). */
export const EVENT_DEDUPE_MS = 10 * 60_000;
/** Event writes in flight at once. */
export const EVENT_WRITERS = 4;
/** Events waiting to be written beyond which new ones are dropped; client-go's buffer, 1,000. */
export const EVENT_QUEUE_LIMIT = 1_000;

/** What one event says. */
export interface EventSpec {
  /** `Normal` for what went as intended, `Warning` for what needs attention. */
  type: "Normal" | "Warning";
  /** Short UpperCamelCase reason, e.g. `PodCreated`. */
  reason: string;
  /** What the controller did or failed to do, e.g. `Create`. */
  action: string;
  /** Human-readable detail, at most 1 kB. */
  note: string;
  /** A related object, e.g. the Pod, if any. */
  related?: KubeObject;
}

/** Writes Events; see the module doc. */
export class EventRecorder {
  #client: KubeClient;
  #controller: string;
  #instance: string;
  #recent = new Map<string, number>();
  #seq = 0;
  #onError: (err: unknown) => void;
  #queue: KubeObject[] = [];
  #writers = 0;
  #idle: (() => void)[] = [];
  /** Events dropped because the queue was full. */
  dropped = 0;

  /**
   * A recorder writing through `client`; nothing is written until {@link EventRecorder.record}.
   * @param client writes the events
   * @param reportingController e.g. `apps.our-org.com/appservice-operator`
   * @param reportingInstance this process's identity
   * @param onError told when a write fails (events are best effort)
   */
  constructor(
    client: KubeClient,
    reportingController: string,
    reportingInstance: string,
    onError: (err: unknown) => void = () => {},
  ) {
    this.#client = client;
    this.#controller = reportingController;
    this.#instance = reportingInstance;
    this.#onError = onError;
  }

  /**
   * Queues an event about `regarding` (in its namespace) and returns at once. Never throws; a
   * failed write is reported through `onError`.
   */
  record(regarding: KubeObject, e: EventSpec): void {
    const m = regarding.metadata ?? {};
    const key = `${m.uid}|${e.reason}|${e.note}`;
    const now = Date.now();
    const last = this.#recent.get(key);
    if (last !== undefined && now - last < EVENT_DEDUPE_MS) return;
    this.#recent.set(key, now);
    if (this.#recent.size > 5_000) {
      for (const [k, t] of this.#recent) if (now - t >= EVENT_DEDUPE_MS) this.#recent.delete(k);
    }
    if (this.#queue.length >= EVENT_QUEUE_LIMIT) {
      this.dropped++;
      return;
    }
    this.#queue.push(this.#build(regarding, e, now));
    this.#pump();
  }

  /** Resolves when every queued event has been written (or failed). */
  flush(): Promise<void> {
    if (this.#queue.length === 0 && this.#writers === 0) return Promise.resolve();
    return new Promise((r) => this.#idle.push(r));
  }

  #pump(): void {
    while (this.#writers < EVENT_WRITERS && this.#queue.length > 0) {
      const ev = this.#queue.shift()!;
      this.#writers++;
      this.#client.create(EVENTS, ev)
        .catch((err) => this.#onError(err))
        .finally(() => {
          this.#writers--;
          this.#pump();
          if (this.#writers === 0 && this.#queue.length === 0) {
            for (const r of this.#idle.splice(0)) r();
          }
        });
    }
  }

  #build(regarding: KubeObject, e: EventSpec, now: number): KubeObject {
    const m = regarding.metadata ?? {};
    const ref = (o: KubeObject) => ({
      apiVersion: o.apiVersion,
      kind: o.kind,
      name: o.metadata?.name,
      namespace: o.metadata?.namespace,
      uid: o.metadata?.uid,
      resourceVersion: o.metadata?.resourceVersion,
    });
    return {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      // client-go names events <object>.<unix nanoseconds in hex>.
      metadata: {
        name: `${m.name}.${
          (BigInt(now) * 1_000_000n + BigInt(this.#seq++ % 1_000_000)).toString(16)
        }`,
        namespace: m.namespace ?? "default",
      },
      eventTime: microTime(now),
      reportingController: this.#controller,
      reportingInstance: this.#instance,
      action: e.action,
      reason: e.reason,
      note: e.note.slice(0, 1024),
      type: e.type,
      regarding: ref(regarding),
      related: e.related ? ref(e.related) : undefined,
    } as KubeObject;
  }
}
