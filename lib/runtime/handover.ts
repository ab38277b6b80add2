/**
 * Lease handover under a server-side fence (docs/design/fencing.md, "Sealing a takeover").
 *
 * deploy/'s Lease-holder admission policy reads the Lease from the apiserver's own informer, so
 * for a moment after a Lease write the apiserver may still judge writes on the previous holder.
 * A candidate that takes the Lease therefore seals it first: it writes a handover marker as the
 * holder (a name no replica's Pod name is a prefix of, so the policy admits nobody), probes with
 * a dry-run write until the policy's refusal names that marker — from then on the apiserver
 * refuses the previous holder — and only then writes itself as holder with a new acquireTime.
 * After taking the Lease it probes again until its own writes are admitted, before its first
 * write. Without the policy (or without the Lease as its parameter) the probe is admitted at once
 * and nothing waits.
 *
 * The probe is a dry-run create (`dryRun=All`: admission runs, nothing is stored) of an
 * events.k8s.io/v1 Event about the Lease, in the Lease's namespace, sent by the Lease's client
 * (no client-side fence). It needs the operator's `events.k8s.io` create permission there.
 *
 * @module
 */
import type { KubeClient } from "../kube/client.ts";
import { FencedError } from "../kube/errors.ts";
import { EVENTS } from "../kube/resources.ts";
import { type Clock, realClock, sleepOn } from "./clock.ts";
import { microTime } from "./leader.ts";

/**
 * Prefix of a handover marker: the holder identity a candidate writes while it seals a takeover.
 * A marker holds no `_`, so no `<Pod name>_` (the policy's rule) is a prefix of it.
 */
export const HANDOVER_PREFIX = "handover:";

/**
 * A handover marker for the candidate `identity`: {@link HANDOVER_PREFIX}, the identity with
 * `_` replaced by `.`, and a random suffix (unique per takeover; the probe recognises it).
 */
export function handoverMarker(identity: string, random: () => number = Math.random): string {
  const nonce = Math.floor(random() * 2 ** 32).toString(16).padStart(8, "0");
  return `${HANDOVER_PREFIX}${identity.replaceAll("_", ".")}.${nonce}`;
}

/** Whether a Lease holder identity is a handover marker (a takeover being sealed, not a holder). */
export function isHandoverMarker(holder: string | undefined): boolean {
  return !!holder?.startsWith(HANDOVER_PREFIX);
}

/** What one probe of the Lease-holder policy saw. */
export type FenceProbe =
  /** Admitted: the policy does not refuse this replica (or is not in force for this Lease). */
  | { kind: "admitted" }
  /** Refused by the Lease-holder policy, which judged on the Lease naming `holder`. */
  | { kind: "refused"; holder: string }
  /** Anything else (RBAC, a network error): the probe cannot tell. */
  | { kind: "failed"; error: unknown };

/** The holder the Lease-holder policy's refusal names (`... (held by '<holder>')`). */
const HELD_BY = /\(held by '([^']*)'\)/;

/**
 * Sends one probe: a dry-run create of an events.k8s.io/v1 Event regarding the Lease
 * `namespace/name`, as `identity`. Never throws (a failure is `{kind: "failed"}`).
 * @param client the Lease's client: no client-side write fence
 */
export async function probeLeaseFence(
  client: KubeClient,
  namespace: string,
  name: string,
  identity: string,
  signal?: AbortSignal,
): Promise<FenceProbe> {
  try {
    await client.create(EVENTS, {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: `${name}.lease-fence-probe`, namespace },
      eventTime: microTime(Date.now()),
      reportingController: "apps.our-org.com/lease-handover",
      reportingInstance: identity.slice(0, 128),
      action: "Probe",
      reason: "LeaseHandover",
      type: "Normal",
      note: "dry run: is the Lease-holder policy judging on the current Lease?",
      regarding: { apiVersion: "coordination.k8s.io/v1", kind: "Lease", namespace, name },
    }, { namespace, dryRun: true, signal });
    return { kind: "admitted" };
  } catch (err) {
    if (err instanceof FencedError && err.reason === "NotLeaseHolder") {
      const m = HELD_BY.exec(err.apiError?.status?.message ?? "");
      if (m) return { kind: "refused", holder: m[1] };
    }
    return { kind: "failed", error: err };
  }
}

/** How a wait for the policy ended; see {@link awaitLeaseFence}. */
export interface FenceWait {
  /** The last probe's answer. */
  last: FenceProbe;
  /** True when `done` accepted it; false when the time ran out (or the signal aborted). */
  done: boolean;
  /** Time waited (ms, on the given clock). */
  waitedMs: number;
  /** Probes sent. */
  probes: number;
}

/**
 * Probes every `intervalMs` until `done(probe)` holds, `timeoutMs` has passed or `signal`
 * aborts. Never throws. Bounded: at most `timeoutMs / intervalMs + 1` probes.
 */
export async function awaitLeaseFence(
  probe: (signal: AbortSignal) => Promise<FenceProbe>,
  done: (p: FenceProbe) => boolean,
  o: { timeoutMs: number; intervalMs?: number; clock?: Clock; signal: AbortSignal },
): Promise<FenceWait> {
  const clock = o.clock ?? realClock;
  const interval = o.intervalMs ?? 20;
  const start = clock.now();
  const maxProbes = Math.ceil(o.timeoutMs / interval) + 1;
  let last: FenceProbe = { kind: "failed", error: new Error("not probed") };
  let probes = 0;
  while (probes < maxProbes && !o.signal.aborted) {
    const left = o.timeoutMs - (clock.now() - start);
    probes++;
    last = await probe(AbortSignal.any([o.signal, AbortSignal.timeout(Math.max(1, left))]));
    if (done(last)) return { last, done: true, waitedMs: clock.now() - start, probes };
    if (clock.now() - start + interval > o.timeoutMs) break;
    try {
      await sleepOn(clock, interval, o.signal);
    } catch {
      break;
    }
  }
  return { last, done: false, waitedMs: clock.now() - start, probes };
}

/** One report of the Lease handover, for logs and metrics. */
export interface HandoverReport {
  /**
   * `seal`: before taking the Lease (the previous holder must be refused); `confirm`: after,
   * before the first write (this replica must be admitted).
   */
  step: "seal" | "confirm";
  /** The holder before the takeover ("" when the Lease was released); `seal` only. */
  previous?: string;
  /**
   * `in-force`: the policy refuses the previous holder (seal) or admits this replica (confirm);
   * `not-in-force`: the probe was admitted while the marker held the Lease (no policy, or not
   * for this Lease); `timeout`: the policy still judged on another holder when the time ran out;
   * `refuses-holder`: the policy refuses this replica although it holds the Lease (its identity
   * does not start with its Pod name); `failed`: the probe could not tell (see `error`).
   */
  outcome: "in-force" | "not-in-force" | "timeout" | "refuses-holder" | "failed";
  /** The holder the last refusal named, if any. */
  holder?: string;
  /** Time waited (ms). */
  waitedMs: number;
  /** Probes sent. */
  probes: number;
  /** The failed probe's error (`failed`). */
  error?: unknown;
}
