/**
 * Runnables in groups, started in a fixed order and stopped in the reverse one (the shape of
 * controller-runtime's manager runnable groups): the manager's groups are `servers` (probes,
 * metrics), `caches` (informers), `election` (the Lease) and `controllers` (workers), so the
 * controllers stop before the Lease is released, and the caches and servers last.
 *
 * @module
 */

/**
 * A promise resolved when `signal` aborts (at once when it already has). Never rejects. The
 * listener is removed when it fires; a signal that never aborts keeps it for the signal's life.
 */
export function whenAborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

/**
 * Something the manager runs until it is stopped: a server, an informer, the elector, the
 * controllers.
 */
export interface Runnable {
  /** For logs and errors. */
  readonly name: string;
  /**
   * Starts it; resolves once it has started (a server bound), rejects for a start-up failure
   * (having started nothing that outlives `signal`). It runs until `signal` aborts.
   */
  start(signal: AbortSignal): Promise<void> | void;
  /**
   * Called after `signal` aborted, when its group stops: resolves once it has finished (workers
   * drained, the Lease released, a client closed). Default: nothing to wait for.
   */
  stopped?(): Promise<void> | void;
}

/** The members of one group, started in the order they were added, stopped together. */
class RunnableGroup {
  readonly #members: Runnable[] = [];
  readonly #stop = new AbortController();
  #started: Runnable[] = [];
  #state: "idle" | "started" | "stopped" = "idle";

  add(r: Runnable): void {
    if (this.#state !== "idle") throw new Error(`runnable ${r.name} added after its group started`);
    this.#members.push(r);
  }

  get started(): boolean {
    return this.#state !== "idle";
  }

  /** Starts every member in order; on a failure the members started so far are stopped. */
  async start(): Promise<void> {
    if (this.#state !== "idle") return;
    this.#state = "started";
    for (const r of this.#members) {
      await r.start(this.#stop.signal);
      this.#started.push(r);
    }
  }

  /** Aborts the group's signal and waits for every started member's `stopped`. */
  async stop(): Promise<void> {
    if (this.#state === "stopped") return;
    this.#state = "stopped";
    this.#stop.abort();
    await Promise.all(this.#started.map((r) => r.stopped?.()));
  }
}

/**
 * Named groups of runnables. {@link RunnableGroups.start} starts the groups in their given order
 * (a group already started ahead, e.g. the caches beside a start gate, is skipped); a start-up
 * failure stops what was started, in reverse, and is rethrown. {@link RunnableGroups.stop} stops
 * the started groups in reverse order, each finished before the next stops.
 */
export class RunnableGroups<G extends string> {
  readonly #order: readonly G[];
  readonly #groups = new Map<G, RunnableGroup>();

  /** @param order group names, in start order (the stop order is the reverse) */
  constructor(order: readonly G[]) {
    this.#order = order;
    for (const g of order) this.#groups.set(g, new RunnableGroup());
  }

  /**
   * Adds `r` to `group`, to start after the members added before it.
   * @throws Error once that group has started
   */
  add(group: G, r: Runnable): void {
    this.#groups.get(group)!.add(r);
  }

  /**
   * Starts `groups` (default: all) in the constructor's order, skipping those already started.
   * @throws the first start-up failure, after stopping every started group (reverse order)
   */
  async start(...groups: G[]): Promise<void> {
    for (const g of this.#order) {
      if (groups.length && !groups.includes(g)) continue;
      try {
        await this.#groups.get(g)!.start();
      } catch (err) {
        await this.stop();
        throw err;
      }
    }
  }

  /** Stops the started groups in reverse order; resolves when the last has finished. */
  async stop(): Promise<void> {
    for (const g of [...this.#order].reverse()) {
      const group = this.#groups.get(g)!;
      if (group.started) await group.stop();
    }
  }
}
