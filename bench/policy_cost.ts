/**
 * `deno task bench:policy`: what deploy/shard_fence_policy.yaml costs the apiserver per write,
 * measured with kube-apiserver's own admission code (k8s.io/apiserver v0.36.3, bench/policy_cost/,
 * built with `go build` into the cache) rather than read from a running apiserver's histogram,
 * which mixes in queueing and the rest of admission.
 *
 * The case: `--shards` shard Leases (names, labels and hash-range annotations as the operator
 * writes them, lib/runtime/shard_fence_cel.ts) held round-robin by `--replicas` Pods; `--requests`
 * namespace names of 1–63 random characters (seeded); for each, a Pod create by the holder of its
 * shard (must be admitted) and, with more than one replica, one by another replica (must be
 * refused). The policy is evaluated once per Lease per request, `--runs` times. Reported per
 * ordering of the validation (`--order`): deploy/'s (the writer's own Lease first) and/or the range
 * first (the expression's two sides swapped; the same verdicts): µs per evaluation of a Lease the
 * writer holds and of one it does not, and per admitted request (all Leases), as the median and
 * range over the runs. Any verdict other than the shard contract's (lib/runtime/shards.ts) fails
 * the run (exit 1).
 *
 * ```sh
 * deno task bench:policy [--shards 4] [--replicas 2] [--requests 300] [--runs 3] [--order both]
 * ```
 * docs/design/sharding.md ("Cost") quotes its figures.
 * @module
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { cacheDir } from "../tests/cluster/cluster.ts";
import { goBuild } from "./lib/operators.ts";
import { memberLabelValue, shardLeaseName } from "../lib/runtime/shard_elector.ts";
import { shardLeaseMetadata } from "../lib/runtime/shard_fence_cel.ts";
import { shardOf } from "../lib/runtime/shards.ts";
import { SHARD_POLICY_PATH } from "../lib/appservice/fence_policy_gen.ts";

/** deploy/'s election id (the binding's label value) and the Leases' namespace. */
const ELECTION_ID = "appservice-operator.apps.our-org.com";
const LEASE_NAMESPACE = "appservice-system";

/** Which side of the validation's `||` comes first. */
type Order = "holder-first" | "range-first";

interface Policy {
  spec: {
    matchConditions: { expression: string }[];
    validations: { expression: string }[];
  };
}

interface Lease {
  name: string;
  namespace: string;
  holder: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

interface Request {
  namespace: string;
  user: string;
  pod: string;
  /** Whether the shard contract admits it (not sent to the evaluator). */
  expect: boolean;
}

/** deploy/'s policy (the first document), with its validation in `order`. */
async function policyIn(order: Order): Promise<Policy> {
  const text = await Deno.readTextFile(SHARD_POLICY_PATH);
  const policy = parseAllDocuments(text)[0].toJS() as Policy;
  const v = policy.spec.validations[0];
  const m = /^(\(.*\)) \|\| (!variables\.judges)$/.exec(v.expression);
  if (!m) throw new Error(`unexpected validation in deploy/: ${v.expression}`);
  if (order === "range-first") v.expression = `${m[2]} || ${m[1]}`;
  return policy;
}

/** The ServiceAccount user the policy's match condition names. */
function policyUser(p: Policy): string {
  for (const c of p.spec.matchConditions) {
    const m = /request\.userInfo\.username == ("[^"]+")/.exec(c.expression);
    if (m) return JSON.parse(m[1]);
  }
  throw new Error("the policy names no ServiceAccount user");
}

/** A namespace name of `length` characters (a DNS label) from `random`. */
function namespaceName(length: number, random: () => number): string {
  const inner = "abcdefghijklmnopqrstuvwxyz0123456789-";
  const edge = "abcdefghijklmnopqrstuvwxyz0123456789";
  let s = "";
  for (let i = 0; i < length; i++) {
    const set = i === 0 || i === length - 1 ? edge : inner;
    s += set[Math.floor(random() * set.length)];
  }
  return s;
}

/** A seeded generator (mulberry32), so every run and ordering sees the same names. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Median, min and max of `xs`. */
function spread(xs: number[]): { median: number; min: number; max: number } {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  const median = s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { median, min: s[0], max: s[s.length - 1] };
}

function fmt(x: { median: number; min: number; max: number }): string {
  const f = (v: number) => v.toFixed(0);
  return `${f(x.median)} (${f(x.min)}–${f(x.max)})`;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      shards: { type: "string", default: "4" },
      replicas: { type: "string", default: "2" },
      requests: { type: "string", default: "300" },
      runs: { type: "string", default: "3" },
      order: { type: "string", default: "both" },
      seed: { type: "string", default: "1" },
    },
  });
  const shards = Number(values.shards), replicas = Number(values.replicas);
  const requests = Number(values.requests), runs = Number(values.runs);
  if (![shards, replicas, requests, runs].every((n) => Number.isInteger(n) && n >= 1)) {
    throw new Error("--shards, --replicas, --requests and --runs take whole numbers ≥ 1");
  }
  const orders: Order[] = values.order === "both"
    ? ["holder-first", "range-first"]
    : [values.order as Order];
  if (!orders.every((o) => o === "holder-first" || o === "range-first")) {
    throw new Error("--order: holder-first, range-first or both");
  }
  const bin = await goBuild("policy_cost", join(cacheDir(), "bench", "appservice-policy-cost"));
  const holderOf = (k: number) => `replica-${k % replicas}_${k.toString(16).padStart(8, "0")}`;
  const leases: Lease[] = Array.from({ length: shards }, (_, k) => ({
    name: shardLeaseName(ELECTION_ID, k),
    namespace: LEASE_NAMESPACE,
    holder: holderOf(k),
    ...shardLeaseMetadata(memberLabelValue(ELECTION_ID), k, shards),
  }));
  const random = seeded(Number(values.seed));
  const names = Array.from(
    { length: requests },
    () => namespaceName(1 + Math.floor(random() * 63), random),
  );
  console.log(
    `shard fence policy: ${shards} shard Leases over ${replicas} replicas, ${requests} namespaces ` +
      `of 1–63 characters, ${runs} runs; µs, median (min–max) over the runs`,
  );
  for (const order of orders) {
    const policy = await policyIn(order);
    const user = policyUser(policy);
    const reqs: Request[] = [];
    for (const ns of names) {
      const owner = shardOf(ns, shards) % replicas;
      reqs.push({ namespace: ns, user, pod: `replica-${owner}`, expect: true });
      if (replicas > 1) {
        reqs.push({ namespace: ns, user, pod: `replica-${(owner + 1) % replicas}`, expect: false });
      }
    }
    const child = new Deno.Command(bin, { stdin: "piped", stdout: "piped", stderr: "piped" })
      .spawn();
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(JSON.stringify({
      policy,
      leases,
      requests: reqs.map(({ expect: _, ...r }) => r),
      runs,
    })));
    await w.close();
    const res = await child.output();
    if (!res.success) throw new Error(new TextDecoder().decode(res.stderr).trim());
    const out = JSON.parse(new TextDecoder().decode(res.stdout)) as {
      nanos: number[][];
      verdict: { admitted: boolean; error?: string }[];
    };
    const n = leases.length;
    const wrong: string[] = [];
    for (const [i, r] of reqs.entries()) {
      const verdicts = out.verdict.slice(i * n, (i + 1) * n);
      const errors = verdicts.filter((v) => v.error).map((v) => v.error);
      const admitted = verdicts.every((v) => v.admitted);
      if (errors.length || admitted !== r.expect) {
        wrong.push(
          `${r.namespace} by ${r.pod}: ${admitted ? "admitted" : "refused"}` +
            (errors.length ? ` (${errors[0]})` : ""),
        );
      }
    }
    const held: number[] = [], other: number[] = [], perRequest: number[] = [];
    for (const nanos of out.nanos) {
      let heldSum = 0, heldCount = 0, otherSum = 0, otherCount = 0, admittedSum = 0;
      for (const [i, r] of reqs.entries()) {
        for (let j = 0; j < n; j++) {
          const ns = nanos[i * n + j];
          if (leases[j].holder.startsWith(`${r.pod}_`)) {
            heldSum += ns;
            heldCount++;
          } else {
            otherSum += ns;
            otherCount++;
          }
          if (r.expect) admittedSum += ns;
        }
      }
      if (heldCount) held.push(heldSum / heldCount / 1000);
      if (otherCount) other.push(otherSum / otherCount / 1000);
      perRequest.push(admittedSum / names.length / 1000);
    }
    console.log(
      `${order}: a Lease the writer holds ${held.length ? fmt(spread(held)) : "–"}; ` +
        `one it does not ${other.length ? fmt(spread(other)) : "–"}; ` +
        `an admitted request, all ${n} Leases ${fmt(spread(perRequest))}; ` +
        `verdicts as the shard contract: ${reqs.length - wrong.length}/${reqs.length}`,
    );
    if (wrong.length) {
      console.error(
        `${order}: verdicts other than the shard contract's:\n  ${wrong.slice(0, 5).join("\n  ")}`,
      );
      return 1;
    }
  }
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main());
  } catch (err) {
    console.error(`bench:policy: ${err instanceof Error ? err.message : err}`);
    Deno.exit(1);
  }
}
