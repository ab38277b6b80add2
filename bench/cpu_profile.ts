/**
 * CPU profile of a running operator: connects to its V8 inspector on loopback (start it with
 * `--ours-deno-flags=--inspect=127.0.0.1:PORT` in `deno task bench`, or `deno run --inspect=…`),
 * samples for a while, writes the profile (`.cpuprofile`, readable by Chrome's DevTools) and prints
 * the busy samples by where they were spent: the nearest frame of this project's code (or of an npm
 * package) and the kind of the leaf (its own JavaScript, a Deno extension, a native op), with the
 * inspector's own work and the garbage collector apart. docs/design/runtime.md, "Where a
 * converge's CPU goes", has a run of it.
 *
 * Usage: `deno run -A bench/cpu_profile.ts [--port 9229] [--seconds 20] [--interval-us 200]
 * [--out cpu.cpuprofile] [--top 40]`. It waits up to 60 s for the inspector to answer.
 *
 * @module
 */
import { parseArgs } from "node:util";

/** One node of a V8 CPU profile (Chrome DevTools protocol, `Profiler.ProfileNode`). */
interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

/** A V8 CPU profile (`Profiler.Profile`): nodes and the node of each sample. */
export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
}

/**
 * Busy samples of `p` by category (see the module doc), largest first, and the count of busy
 * samples (all but `(idle)`).
 */
export function categorize(p: CpuProfile, ownUrl: RegExp): {
  busy: number;
  rows: [string, number][];
} {
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of p.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  const counts = new Map<number, number>();
  for (const s of p.samples) counts.set(s, (counts.get(s) ?? 0) + 1);
  const rows = new Map<string, number>();
  let busy = 0;
  for (const [id, count] of counts) {
    const leaf = byId.get(id)!.callFrame;
    if (leaf.functionName === "(idle)") continue;
    busy += count;
    const stack: ProfileNode["callFrame"][] = [];
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      stack.push(byId.get(cur)!.callFrame);
    }
    let key: string;
    if (stack.some((f) => /inspector/.test(f.url) || /inspector/.test(f.functionName))) {
      key = "(inspector: reporting to the debugger)";
    } else if (leaf.functionName.startsWith("(")) {
      key = leaf.functionName;
    } else {
      const own = stack.find((f) => ownUrl.test(f.url) || f.url.includes("/npm/"));
      const where = !own
        ? "(no frame of ours)"
        : own.url.includes("/npm/")
        ? `npm:${own.url.replace(/^.*\/npm\/[^/]+\/([^/]+(?:\/[^/]+)?)\/.*$/, "$1")}`
        : `${own.url.replace(ownUrl, "")} ${own.functionName || "(anonymous)"}`;
      const kind = /^(ext|node):/.test(leaf.url)
        ? leaf.url.split("/")[0]
        : leaf.url === ""
        ? `native ${leaf.functionName}`
        : "self";
      key = `${where} [${kind}]`;
    }
    rows.set(key, (rows.get(key) ?? 0) + count);
  }
  return { busy, rows: [...rows].sort((a, b) => b[1] - a[1]) };
}

/** Waits for the inspector at `127.0.0.1:port`; returns its first target's WebSocket URL. */
async function inspectorUrl(port: number): Promise<string> {
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/json/list`);
      const targets = await r.json() as { webSocketDebuggerUrl?: string }[];
      if (targets[0]?.webSocketDebuggerUrl) return targets[0].webSocketDebuggerUrl;
    } catch {
      // Not listening yet.
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no V8 inspector answered on 127.0.0.1:${port} within 60 s`);
}

/** Samples the process behind `url` for `seconds` (`intervalUs` apart); returns the profile. */
async function profile(url: string, seconds: number, intervalUs: number): Promise<CpuProfile> {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let next = 0;
  const waiting = new Map<number, (result: unknown) => void>();
  ws.onmessage = (e) => {
    const m = JSON.parse(e.data);
    waiting.get(m.id)?.(m.result);
    waiting.delete(m.id);
  };
  const send = (method: string, params: unknown = {}) =>
    new Promise<unknown>((resolve) => {
      const id = ++next;
      waiting.set(id, resolve);
      ws.send(JSON.stringify({ id, method, params }));
    });
  await send("Profiler.enable");
  await send("Profiler.setSamplingInterval", { interval: intervalUs });
  await send("Profiler.start");
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const { profile } = await send("Profiler.stop") as { profile: CpuProfile };
  ws.close();
  return profile;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      port: { type: "string", default: "9229" },
      seconds: { type: "string", default: "20" },
      "interval-us": { type: "string", default: "200" },
      out: { type: "string", default: "cpu.cpuprofile" },
      top: { type: "string", default: "40" },
    },
  });
  const p = await profile(
    await inspectorUrl(Number(values.port)),
    Number(values.seconds),
    Number(values["interval-us"]),
  );
  await Deno.writeTextFile(values.out, JSON.stringify(p));
  const own = new RegExp(
    `^${new URL("..", import.meta.url).href.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`,
  );
  const { busy, rows } = categorize(p, own);
  const inspector = rows.find(([k]) => k.startsWith("(inspector"))?.[1] ?? 0;
  console.log(`${p.samples.length} samples, ${busy} busy, ${inspector} of them the inspector's`);
  for (const [key, n] of rows.slice(0, Number(values.top))) {
    console.log(
      `${(100 * n / (busy - inspector)).toFixed(1).padStart(6)}% ${String(n).padStart(6)}  ${key}`,
    );
  }
  console.log(`(shares of the ${busy - inspector} busy samples that are not the inspector's)`);
}
