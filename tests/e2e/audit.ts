/**
 * Reads the local control plane's audit log (Metadata level, ResponseComplete stage) to count the
 * requests a given client made: the apiserver's own record, not the client's.
 *
 * @module
 */
import { AssertionError } from "../assert.ts";
import type { AuditEvent } from "../../lib/testing/mod.ts";
import { controlPlane } from "./harness.ts";

export type { AuditEvent };

/** Verbs that change state. */
export const WRITE_VERBS = new Set(["create", "update", "patch", "delete", "deletecollection"]);

/**
 * Whether an audit event is a write that may store something: a write verb, not a dry run
 * (`dryRun=All` runs admission and stores nothing; the elector's probes of the Lease-holder policy
 * while it seals a takeover are dry runs, lib/runtime/handover.ts).
 */
export function isWrite(e: AuditEvent): boolean {
  return WRITE_VERBS.has(e.verb) && !/[?&]dryRun=/.test(e.requestURI);
}

/**
 * Audit events at or after `sinceMs` whose user agent starts with `agentPrefix` (default: the
 * operator's, `appservice-operator/`). Waits a moment first, so just-finished requests are written.
 */
export async function auditEvents(
  sinceMs: number,
  agentPrefix = "appservice-operator/",
): Promise<AuditEvent[]> {
  return await (await controlPlane()).auditEvents({ sinceMs, userAgentPrefix: agentPrefix });
}

/** Write requests (create/update/patch/delete) of the operator at or after `sinceMs`. */
export async function operatorWrites(sinceMs: number, namespace?: string): Promise<AuditEvent[]> {
  return (await auditEvents(sinceMs)).filter((e) =>
    WRITE_VERBS.has(e.verb) && (!namespace || e.objectRef?.namespace === namespace)
  );
}

/** One line per event, for assertion messages. */
export function describe(events: AuditEvent[]): string {
  return events.map((e) => `${e.verb} ${e.requestURI} -> ${e.responseStatus?.code}`).join("\n");
}

/** Epoch ms (fractional, to the microsecond) of an RFC 3339 time with up to 9 fraction digits. */
export function microTimeMs(ts: string): number {
  const m = /^(.*T\d{2}:\d{2}:\d{2})(?:\.(\d+))?Z$/.exec(ts);
  if (!m) return Date.parse(ts);
  return Date.parse(`${m[1]}Z`) + Number(`0.${m[2] ?? "0"}`) * 1000;
}

/** When the apiserver received the request (epoch ms, to the microsecond). */
export function receivedMs(e: AuditEvent): number {
  return microTimeMs(e.requestReceivedTimestamp ?? e.stageTimestamp);
}

/**
 * The operator's writes received from `sinceMs` until this is called (the window's end), proven
 * able to see a write: `control` then makes the operator write (a change it must act on), and the
 * audit log is read again, at most `timeoutMs`, until the same filter (the operator's user agent,
 * a write verb, `namespace`, `filter`) sees a write received after the end. So an empty result
 * means "no writes", not "saw nothing": a changed User-Agent, a lagging audit file or a filter
 * that matches nothing fail here instead.
 * @throws AssertionError when the control's write is never seen.
 */
export async function quietWindowWrites(
  sinceMs: number,
  control: () => Promise<unknown>,
  opts: { namespace?: string; filter?: (e: AuditEvent) => boolean; timeoutMs?: number } = {},
): Promise<AuditEvent[]> {
  const end = Date.now();
  const filter = opts.filter ?? (() => true);
  const timeoutMs = opts.timeoutMs ?? 30_000;
  await control();
  const deadline = Date.now() + timeoutMs;
  for (let i = 0; i < 1_000; i++) {
    const writes = (await operatorWrites(sinceMs, opts.namespace)).filter(filter);
    if (writes.some((e) => receivedMs(e) >= end)) return writes.filter((e) => receivedMs(e) < end);
    if (Date.now() > deadline) break;
  }
  throw new AssertionError(
    `positive control: no write of the operator after the window was seen within ${timeoutMs} ms ` +
      `(user agent, audit log or filter cannot see writes)`,
  );
}
