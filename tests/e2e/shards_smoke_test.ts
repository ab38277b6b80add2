/**
 * Sharding smoke test (docs/design/sharding.md) on the shared control plane: two replicas with
 * `--shards 4` and their own identities split the shards 2 and 2 (per their shard Leases and
 * `appservice_shards_held`), every AppService (one namespace per shard) becomes Ready, and after
 * SIGTERM of one (exit 0, its shards released and its membership Lease deleted) the other holds
 * all four and reconciles a change in a namespace of a shard it took over.
 */
import { assert, assertEquals } from "../assert.ts";
import { NAMESPACES } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { memberLeaseName, shardLeaseName } from "../../lib/runtime/shard_elector.ts";
import { shardOf } from "../../lib/runtime/shards.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  getLease,
  installCrd,
  logsOf,
  metricSum,
  newNamespace,
  type Operator,
  startOperator,
  waitFor,
} from "./harness.ts";

const SHARDS = 4;
const TIMING_FLAGS = [
  "--leader-elect-lease-duration=4s",
  "--leader-elect-renew-deadline=3s",
  "--leader-elect-retry-period=1s",
];

/** One fresh namespace name per shard (random, hashed until each shard has one). */
function namespacePerShard(): string[] {
  const out: (string | undefined)[] = Array(SHARDS).fill(undefined);
  const prefix = `e2e-shard-${crypto.randomUUID().slice(0, 6)}`;
  for (let i = 0; out.some((n) => n === undefined) && i < 10_000; i++) {
    const ns = `${prefix}-${i}`;
    out[shardOf(ns, SHARDS)] ??= ns;
  }
  assert(out.every((n) => n !== undefined), "a namespace for each shard");
  return out as string[];
}

async function shardsHeld(op: Operator): Promise<number> {
  return metricSum(await op.metrics(), "appservice_shards_held");
}

Deno.test("sharding smoke: two replicas split four shards; SIGTERM moves one's shards to the other", async () => {
  await installCrd();
  const c = await admin();
  const leaseNs = await newNamespace("shard-lease");
  const id = `appservice-e2e-${crypto.randomUUID().slice(0, 6)}`;
  const nss = namespacePerShard();
  for (const ns of nss) {
    await c.create(NAMESPACES, { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } });
  }
  const flags = [
    `--shards=${SHARDS}`,
    `--leader-election-namespace=${leaseNs}`,
    `--leader-election-id=${id}`,
    `--watch-namespace=${nss.join(",")}`,
    ...TIMING_FLAGS,
  ];
  const ops: Operator[] = [];
  try {
    ops.push(await startOperator(flags, { APPSERVICE_POD_NAME: "shard-a" }));
    ops.push(await startOperator(flags, { APPSERVICE_POD_NAME: "shard-b" }));
    const [a, b] = ops;
    // Each replica ends up with 2 shards (the fair share of 4 among 2 live members).
    const holders = await waitFor(
      "2 + 2 shards",
      async () => {
        const hs: string[] = [];
        for (let k = 0; k < SHARDS; k++) {
          hs.push((await getLease(leaseNs, shardLeaseName(id, k)))?.spec?.holderIdentity ?? "");
        }
        const byA = hs.filter((h) => h.startsWith("shard-a_")).length;
        const byB = hs.filter((h) => h.startsWith("shard-b_")).length;
        return byA === 2 && byB === 2 ? hs : undefined;
      },
      60_000,
      250,
    );
    await waitFor(
      "shards_held 2 and 2",
      async () => (await shardsHeld(a)) === 2 && (await shardsHeld(b)) === 2,
      30_000,
    );
    const identityB = holders.find((h) => h.startsWith("shard-b_"))!;
    assert(
      await getLease(leaseNs, memberLeaseName(id, identityB)),
      "b's membership Lease exists",
    );
    assert(logsOf(a, "Shard moved").length >= 2, "moves are logged");
    // The mode line follows the apiserver's answer to a probe, which may come after the split.
    const selectorLines = () => [
      ...logsOf(a, "shard selector served by the apiserver"),
      ...logsOf(a, "not served: filtering client-side"),
    ];
    await waitFor("the shard selector mode line", () => selectorLines().length > 0, 30_000);
    assertEquals(selectorLines().length, 1, "one line on the shard selector mode");

    // Every AppService becomes Ready, whichever replica holds its shard.
    for (const ns of nss) {
      await c.create(APPSERVICES as never, appService(ns, "web", { image: "nginx:1.27" }));
    }
    for (const ns of nss) {
      await waitFor(
        `web Ready in ${ns}`,
        async () => (await getAs(ns, "web")).status?.ready,
        90_000,
      );
    }
    await Promise.all(ops.map((op) => op.waitReady(30_000)));

    // SIGTERM of b: exit 0, its shards released and its membership Lease deleted; a takes them.
    const bShards = holders.flatMap((h, k) => (h === identityB ? [k] : []));
    assertEquals(await b.stop("SIGTERM"), 0);
    assert(!(await getLease(leaseNs, memberLeaseName(id, identityB))), "membership deleted");
    const released = logsOf(b, "Shard moved").filter((l) => l.properties?.reason === "shutdown");
    assertEquals(released.length, 2, "b logged its two give-backs");
    await waitFor(
      "a holds all four shards",
      async () => {
        for (let k = 0; k < SHARDS; k++) {
          const h = (await getLease(leaseNs, shardLeaseName(id, k)))?.spec?.holderIdentity ?? "";
          if (!h.startsWith("shard-a_")) return false;
        }
        return (await shardsHeld(a)) === SHARDS;
      },
      30_000,
      250,
    );
    // A change in a namespace of a shard a took over is reconciled by a.
    const ns = nss[bShards[0]];
    await c.patch(APPSERVICES as never, "web", { spec: { replicas: 2 } }, { namespace: ns });
    await waitFor(`web in ${ns} at 2 ready replicas`, async () => {
      const as = await getAs(ns, "web");
      return (as.status?.readyReplicas ?? 0) >= 2 && as.status?.ready;
    }, 90_000);
  } catch (err) {
    // The operators' logs say where the shards went.
    for (const op of ops) console.error(op.stderr().slice(-8000));
    throw err;
  } finally {
    await Promise.all(ops.map((op) => op.stop("SIGTERM").catch(() => {})));
    for (const ns of [...nss, leaseNs]) await dropNamespace(ns).catch(() => {});
  }
});
