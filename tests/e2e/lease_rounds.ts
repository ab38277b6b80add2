/**
 * Shared parts of the leader-fencing rounds (S13 pause rounds, tests/e2e/fencing_test.ts; S23
 * held-path rounds, tests/e2e/s23_server_fence_test.ts): the bounded background changes that keep
 * the leader reconciling, and the record of every Lease holder and its acquireTime that the audit
 * analysis compares writes with.
 *
 * @module
 */
import type { ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { admin, getLease, sleep } from "./harness.ts";
import { microTimeMs } from "./audit.ts";
import { isHandoverMarker } from "../../lib/runtime/handover.ts";

/**
 * Short leader-election timings that keep rounds short: lease 4 s, renew deadline 3 s, retry
 * period 1 s (the margin a passed write has is lease − renew deadline = 1 s).
 */
export const SHORT_LEASE_FLAGS = [
  "--leader-elect-lease-duration=4s",
  "--leader-elect-renew-deadline=3s",
  "--leader-elect-retry-period=1s",
];

/** A change of the Lease's holder, as recorded by polling it. */
export interface Holding {
  identity: string;
  /** `spec.acquireTime` (epoch ms, to the microsecond). */
  fromMs: number;
}

/** A background loop started by {@link churnAppServices} or {@link recordHolders}. */
export interface Background<T> {
  /** Ends the loop and resolves with its result. */
  stop(): Promise<T>;
}

/**
 * Bounded background changes (20 minutes, 50,000 changes at most): scale the AppServices `names`
 * in `ns` 1..3 and switch their image every other pass, one change every `intervalMs`, so the
 * leader creates and deletes Pods, replaces drifted ones, writes status and records Events.
 * `stop()` resolves with the number of changes made.
 */
export function churnAppServices(
  ns: string,
  names: string[],
  intervalMs: number,
): Background<number> {
  let running = true;
  const done = (async () => {
    const c = await admin();
    const deadline = Date.now() + 20 * 60_000;
    let n = 0;
    for (let i = 0; running && i < 50_000 && Date.now() < deadline; i++) {
      const pass = Math.floor(i / names.length);
      const spec = { replicas: 1 + (pass % 3), image: pass % 2 ? "nginx:1.28" : "nginx:1.27" };
      await c.patch(APPSERVICES as unknown as ResourceType, names[i % names.length], { spec }, {
        namespace: ns,
      }).then(() => n++, () => {});
      await sleep(intervalMs);
    }
    return n;
  })();
  return {
    stop: () => {
      running = false;
      return done;
    },
  };
}

/**
 * Every holder of the Lease `ns/name` (handover markers left out) and its acquireTime, polled every 50 ms (bounded: 20
 * minutes). `stop()` resolves with the holdings in order.
 */
export function recordHolders(ns: string, name: string): Background<Holding[]> {
  let running = true;
  const holdings: Holding[] = [];
  const done = (async () => {
    const deadline = Date.now() + 20 * 60_000;
    for (let i = 0; running && i < 100_000 && Date.now() < deadline; i++) {
      const l = await getLease(ns, name).catch(() => undefined);
      const h = l?.spec?.holderIdentity;
      const from = l?.spec?.acquireTime ? microTimeMs(l.spec.acquireTime) : NaN;
      const last = holdings[holdings.length - 1];
      // A handover marker (a takeover being sealed) holds for nobody: the holding before it goes
      // on until the new holder's acquireTime.
      if (h && !isHandoverMarker(h) && (!last || last.identity !== h || last.fromMs !== from)) {
        holdings.push({ identity: h, fromMs: from });
      }
      await sleep(50);
    }
    return holdings;
  })();
  return {
    stop: () => {
      running = false;
      return done;
    },
  };
}

/** The index in `holdings` of the holding at `atMs` (the last one acquired by then); -1: none. */
export function holdingAt(holdings: Holding[], atMs: number): number {
  let k = -1;
  for (let i = 0; i < holdings.length; i++) if (holdings[i].fromMs <= atMs) k = i;
  return k;
}
