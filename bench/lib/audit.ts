/**
 * Requests per client from the local control plane's audit log (`<cluster dir>/audit.log`, JSON
 * lines at Metadata level): the apiserver's own record of who asked what, split by User-Agent
 * prefix, which the apiserver's `/metrics` cannot do.
 *
 * The log is read incrementally (from the last offset), and only lines of the tracked agents are
 * kept, as small records. A request counts once: at `ResponseComplete`, except watches, which
 * count when they start (`ResponseStarted`; their completion comes minutes later). Time is the
 * request's `requestReceivedTimestamp`.
 *
 * @module
 */

/** One request, reduced to what the benchmark reports. */
export interface AuditRecord {
  /** Index of the matching prefix in {@link AuditLog}'s agent list. */
  agent: number;
  /** Request arrival, ms since the epoch. */
  atMs: number;
  verb: string;
  /** `pods`, `appservices`, `appservices/status`, ... (resource/subresource). */
  resource: string;
  namespace: string;
  code: number;
  /** Time the apiserver took (stage timestamp minus arrival), ms; 0 for watches. */
  serverMs: number;
}

/** Verbs that change state. */
export const WRITE_VERBS: ReadonlySet<string> = new Set([
  "create",
  "update",
  "patch",
  "delete",
  "deletecollection",
]);

/** Bound on the bytes read by one {@link AuditLog.poll} (the rest waits for the next call). */
const MAX_READ_BYTES = 1 << 30;

interface RawEvent {
  stage?: string;
  verb?: string;
  userAgent?: string;
  requestReceivedTimestamp?: string;
  stageTimestamp?: string;
  objectRef?: { resource?: string; subresource?: string; namespace?: string };
  responseStatus?: { code?: number };
}

/** Incremental reader of one audit log for a fixed list of User-Agent prefixes. */
export class AuditLog {
  readonly path: string;
  readonly agents: readonly string[];
  readonly records: AuditRecord[] = [];
  #offset = 0;
  #pending = "";

  /** @param path the audit log; @param agents User-Agent prefixes to keep */
  constructor(path: string, agents: readonly string[]) {
    this.path = path;
    this.agents = agents;
  }

  /** Reads what was appended since the last call. Waits `settleMs` first (default 500). */
  async poll(settleMs = 500): Promise<void> {
    if (settleMs > 0) await new Promise((r) => setTimeout(r, settleMs));
    let file: Deno.FsFile;
    try {
      file = await Deno.open(this.path, { read: true });
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return;
      throw err;
    }
    try {
      const size = (await file.stat()).size;
      if (size < this.#offset) this.#offset = 0; // rotated or recreated
      await file.seek(this.#offset, Deno.SeekMode.Start);
      const want = Math.min(size - this.#offset, MAX_READ_BYTES);
      const buf = new Uint8Array(1 << 20);
      const dec = new TextDecoder();
      let read = 0;
      for (let i = 0; read < want && i < 1_000_000; i++) {
        const n = await file.read(buf.subarray(0, Math.min(buf.length, want - read)));
        if (n === null || n === 0) break;
        read += n;
        this.#consume(dec.decode(buf.subarray(0, n), { stream: true }));
      }
      this.#offset += read;
    } finally {
      file.close();
    }
  }

  #consume(text: string): void {
    const lines = (this.#pending + text).split("\n");
    this.#pending = lines.pop() ?? "";
    for (const line of lines) {
      const idx = this.agents.findIndex((a) => line.includes(`"userAgent":"${a}`));
      if (idx < 0) continue;
      let e: RawEvent;
      try {
        e = JSON.parse(line);
      } catch {
        continue;
      }
      if (e.verb === "watch" ? e.stage !== "ResponseStarted" : e.stage !== "ResponseComplete") {
        continue;
      }
      const ref = e.objectRef ?? {};
      const atMs = parseTime(e.requestReceivedTimestamp);
      this.records.push({
        agent: idx,
        atMs,
        serverMs: e.verb === "watch" ? 0 : parseTime(e.stageTimestamp) - atMs,
        verb: e.verb ?? "",
        resource: ref.subresource ? `${ref.resource}/${ref.subresource}` : ref.resource ?? "",
        namespace: ref.namespace ?? "",
        code: e.responseStatus?.code ?? 0,
      });
    }
  }

  /** Records of `agent` (an entry of the agent list) with `fromMs <= atMs < toMs`. */
  between(agent: string, fromMs: number, toMs: number): AuditRecord[] {
    const idx = this.agents.indexOf(agent);
    return this.records.filter((r) => r.agent === idx && r.atMs >= fromMs && r.atMs < toMs);
  }
}

/** RFC 3339 with up to nanoseconds to ms since the epoch (fraction kept to 1 µs). */
export function parseTime(s: string | undefined): number {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?Z$/.exec(s ?? "");
  if (!m) return NaN;
  const frac = (m[2] ?? "").padEnd(6, "0").slice(0, 6);
  return Date.parse(`${m[1]}Z`) + Number(frac) / 1000;
}

/** Mean apiserver time of the write requests among `records`, ms. */
export function meanWriteServerMs(records: AuditRecord[]): number {
  const w = records.filter((r) => WRITE_VERBS.has(r.verb) && !r.resource.endsWith("reviews"));
  return w.length === 0 ? NaN : w.reduce((s, r) => s + r.serverMs, 0) / w.length;
}

/**
 * Mean apiserver time (ms, 2 decimals) of the write requests among `records`, keyed `verb resource`
 * (e.g. `create pods`), sorted by key. The mean over all writes mixes kinds of different cost (a Pod
 * create passes more admission than a status patch), so two clients with other mixes compare only
 * kind by kind.
 */
export function writeServerMsByVerbResource(records: AuditRecord[]): Record<string, number> {
  const sum: Record<string, [number, number]> = {};
  for (const r of records) {
    if (!WRITE_VERBS.has(r.verb) || r.resource.endsWith("reviews")) continue;
    const k = `${r.verb} ${r.resource}`;
    const e = sum[k] ??= [0, 0];
    e[0] += r.serverMs;
    e[1]++;
  }
  return Object.fromEntries(
    Object.entries(sum).sort(([a], [b]) => a.localeCompare(b))
      .map(([k, [ms, n]]) => [k, Number((ms / n).toFixed(2))]),
  );
}

/** Request counts keyed `verb resource` (e.g. `create pods`), sorted by key. */
export function countByVerbResource(records: AuditRecord[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of records) {
    const k = `${r.verb} ${r.resource}`;
    out[k] = (out[k] ?? 0) + 1;
  }
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => a.localeCompare(b)));
}

/**
 * Number of write requests (create, update, patch, delete) among `records`. Creates of review
 * resources (SelfSubjectReview, TokenReview, ...) are questions, not stored objects: not counted.
 */
export function countWrites(records: AuditRecord[]): number {
  return records.filter((r) => WRITE_VERBS.has(r.verb) && !r.resource.endsWith("reviews")).length;
}
