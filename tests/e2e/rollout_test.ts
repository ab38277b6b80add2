/**
 * S22: zero-downtime rollouts. Pods take time to become Ready here, as on a real kubelet: the test
 * adds a Node kwok does not manage and plays its kubelet (as stuck_test.ts does). The Node alone
 * offers an extended resource that the AppServices request, so the scheduler binds their Pods to
 * it; the test's kubelet reports each new Pod Running and Ready {@link READY_DELAY_MS} after it is
 * bound (with a Pod IP: a value in an object, never an address anyone connects to), confirms a
 * deletion {@link TERMINATION_MS} after it began, and reports ImagePullBackOff for images tagged
 * `never-*`.
 *
 * While AppServices of 1, 2 and 4 replicas roll to a new image {@link ROLLOUTS} times each, the
 * test samples every 100 ms the ready endpoints of their Services' EndpointSlices and the
 * `Available` condition, and a watch counts their Pods. It asserts: ready endpoints never below
 * `replicas - maxUnavailable` (the defaults: never below `replicas`), never more Pods than
 * `replicas + maxSurge`, `Available` never False. It prints per replica count the lowest
 * ready-endpoint count, the seconds with fewer than `replicas` ready endpoints per rollout and the
 * rollout's duration. Then a rollout to an image that never becomes Ready keeps the old Pods
 * serving and ends in ProgressDeadlineExceeded (a Warning Event too), and reverting the image
 * rolls back at once, keeping the Pods that served. Last, `kubectl drain` of the Node takes at most
 * the PodDisruptionBudget the operator keeps (one Pod of four: the replacement cannot be scheduled
 * while the Node is cordoned, so the drain gives up), and the budget goes when turned off.
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { EVENTS, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { rt } from "./resources.ts";
import { addTestNode, NODES, removeTestNode, runTestKubelet } from "./test_node.ts";

const AS = APPSERVICES as unknown as ResourceType;
const PDBS = rt("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", true);
const ENDPOINT_SLICES = rt("discovery.k8s.io/v1", "EndpointSlice", "endpointslices", true);
/** An extended resource only the test's Node offers: the AppServices' Pods can run nowhere else. */
const TEST_RESOURCE = "e2e.example.com/rollout";
/** How long the test's kubelet takes to report a bound Pod Ready (ms). */
const READY_DELAY_MS = 700;
/** How long the test's kubelet takes to confirm a deletion (ms): the app's graceful stop. */
const TERMINATION_MS = 200;
/** Rollouts per AppService. */
const ROLLOUTS = 20;
/** Sampling period of the endpoints and conditions (ms). */
const SAMPLE_MS = 100;
const IMAGE = (tag: string) => `registry.invalid/team/app:${tag}`;

/** Ready endpoints of the Service `name` (its EndpointSlices), counted once per Pod. */
async function readyEndpoints(c: KubeClient, ns: string, name: string): Promise<number> {
  const slices = await c.list<EndpointSlice & KubeObject>(ENDPOINT_SLICES, {
    namespace: ns,
    labelSelector: `kubernetes.io/service-name=${name}`,
  });
  const ready = new Set<string>();
  for (const s of slices.items) {
    for (const e of s.endpoints ?? []) {
      if (e.conditions?.ready) ready.add(e.targetRef?.name ?? e.addresses.join());
    }
  }
  return ready.size;
}

/** A watch of one AppService's Pods that counts the Pod objects that exist (terminating too). */
function podCounter(c: KubeClient, ns: string, name: string) {
  const ctl = new AbortController();
  const pods = new Set<string>();
  let max = 0;
  let error: unknown;
  const selector = `app.kubernetes.io/instance=${name}`;
  const done = (async () => {
    const { items, resourceVersion } = await c.listAll<Pod>(PODS, {
      namespace: ns,
      labelSelector: selector,
    });
    for (const p of items) pods.add(p.metadata!.name!);
    max = pods.size;
    let rv = resourceVersion;
    // Watches end at the server's timeout: resumed from the last resourceVersion, bounded by abort.
    while (!ctl.signal.aborted) {
      try {
        for await (
          const ev of c.watch<Pod>(PODS, {
            namespace: ns,
            labelSelector: selector,
            resourceVersion: rv,
            allowWatchBookmarks: true,
            signal: ctl.signal,
          })
        ) {
          rv = ev.object.metadata?.resourceVersion ?? rv;
          if (ev.type === "BOOKMARK") continue;
          if (ev.type === "DELETED") pods.delete(ev.object.metadata!.name!);
          else pods.add(ev.object.metadata!.name!);
          max = Math.max(max, pods.size);
        }
      } catch (err) {
        if (!ctl.signal.aborted) error = err;
        return;
      }
    }
  })();
  return {
    /** The most Pods seen at once since the last reset. */
    max: () => max,
    reset: () => max = pods.size,
    stop: async () => {
      ctl.abort();
      await done;
      if (error) throw error;
    },
  };
}

/** The condition `type` of an AppService. */
const cond = (a: AppService, type: string) => a.status?.conditions?.find((x) => x.type === type);

/** Whether `a` has finished rolling out its current spec: Ready, observed, no old Pod left. */
function rolledOut(a: AppService, replicas: number): boolean {
  return a.status?.observedGeneration === a.metadata.generation &&
    cond(a, "Ready")?.status === "True" && a.status?.updatedReplicas === replicas &&
    a.status?.replicas === replicas;
}

/** Per-AppService samples of one rollout. */
interface RolloutSample {
  minReady: number;
  /** Seconds (sum of sample periods) with fewer than `replicas` ready endpoints. */
  belowSeconds: number;
  durationSeconds: number;
  maxPods: number;
  availableFalse: number;
}

Deno.test("S22: rollouts keep serving: surge first, Available stays True, a failed rollout keeps the old Pods", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("s22");
  const node = `e2e-rollout-${ns.slice(-6)}`;
  await addTestNode(c, node, "e2e-rollout", "127.0.0.3", { [TEST_RESOURCE]: "1000" });
  const kubeletStop = new AbortController();
  let kubelet: Promise<void> | undefined;
  const op = await startOperator();
  const counters: ReturnType<typeof podCounter>[] = [];
  try {
    kubelet = runTestKubelet(c, ns, node, kubeletStop.signal, {
      readyAfterMs: () => READY_DELAY_MS,
      terminationMs: TERMINATION_MS,
    });
    await op.waitReady();

    const sizes = [1, 2, 4];
    const name = (r: number) => `r${r}`;
    const spec = (r: number, tag: string) => ({
      image: IMAGE(tag),
      replicas: r,
      ports: [{ containerPort: 8080, name: "http" }],
      resources: { requests: { [TEST_RESOURCE]: "1" }, limits: { [TEST_RESOURCE]: "1" } },
    });
    for (const r of sizes) await c.create(AS, appService(ns, name(r), spec(r, "v0")));
    for (const r of sizes) {
      await waitFor(`${name(r)} Ready with ${r} ready endpoints`, async () => {
        const a = await getAs(ns, name(r));
        return rolledOut(a, r) && await readyEndpoints(c, ns, name(r)) === r;
      }, 60_000);
      counters.push(podCounter(c, ns, name(r)));
    }

    const results = new Map<number, RolloutSample[]>(sizes.map((r) => [r, []]));
    await t.step(
      `${ROLLOUTS} rollouts each at replicas 1, 2 and 4, sampled every ${SAMPLE_MS} ms`,
      async () => {
        for (let i = 1; i <= ROLLOUTS; i++) {
          const t0 = Date.now();
          counters.forEach((k) => k.reset());
          const samples = new Map<number, RolloutSample>(
            sizes.map((r) => [r, {
              minReady: Infinity,
              belowSeconds: 0,
              durationSeconds: 0,
              maxPods: 0,
              availableFalse: 0,
            }]),
          );
          for (const r of sizes) {
            await c.patch(AS, name(r), { spec: { image: IMAGE(`v${i}`) } }, { namespace: ns });
          }
          const pending = new Set(sizes);
          // Bounded: 60 s per rollout round.
          while (pending.size > 0) {
            assert(Date.now() - t0 < 60_000, `rollout ${i} of ${[...pending]} not done in 60 s`);
            await sleep(SAMPLE_MS);
            for (const r of sizes) {
              const s = samples.get(r)!;
              const [a, ready] = await Promise.all([
                getAs(ns, name(r)),
                readyEndpoints(c, ns, name(r)),
              ]);
              if (!pending.has(r)) continue;
              s.minReady = Math.min(s.minReady, ready);
              if (ready < r) s.belowSeconds += SAMPLE_MS / 1000;
              if (cond(a, "Available")?.status !== "True") s.availableFalse++;
              if (a.spec.image === IMAGE(`v${i}`) && rolledOut(a, r) && ready === r) {
                s.durationSeconds = (Date.now() - t0) / 1000;
                pending.delete(r);
              }
            }
          }
          sizes.forEach((r, k) => {
            const s = samples.get(r)!;
            s.maxPods = counters[k].max();
            results.get(r)!.push(s);
          });
        }
        // Figures first (the note quotes them), then the checks.
        for (const r of sizes) {
          const l = results.get(r)!;
          const f = (xs: number[]) =>
            `min ${Math.min(...xs).toFixed(1)} / mean ${
              (xs.reduce((x, y) => x + y, 0) / xs.length).toFixed(2)
            } / max ${Math.max(...xs).toFixed(1)}`;
          console.log(
            `replicas ${r}: lowest ready endpoints ${Math.min(...l.map((x) => x.minReady))}; ` +
              `s below ${r} per rollout ${f(l.map((x) => x.belowSeconds))}; ` +
              `duration s ${f(l.map((x) => x.durationSeconds))}; ` +
              `most Pods ${Math.max(...l.map((x) => x.maxPods))}; ` +
              `Available not True in ${l.reduce((x, y) => x + y.availableFalse, 0)} samples`,
          );
        }
        for (const r of sizes) {
          const l = results.get(r)!;
          const surge = Math.ceil(r / 4); // the default maxSurge, 25% rounded up
          l.forEach((s, k) => {
            assert(
              s.minReady >= r,
              `replicas ${r}, rollout ${k + 1}: ready endpoints fell to ${s.minReady}`,
            );
            assert(
              s.maxPods <= r + surge,
              `replicas ${r}, rollout ${k + 1}: ${s.maxPods} Pods > ${r + surge}`,
            );
            assertEquals(
              s.availableFalse,
              0,
              `replicas ${r}, rollout ${k + 1}: Available not True`,
            );
          });
        }
      },
    );

    await t.step("kubectl get as shows Up-to-date and Available", async () => {
      const info = await cluster();
      const out = await new Deno.Command(`${info.binDir}/kubectl`, {
        args: [`--kubeconfig=${info.kubeconfig}`, "get", "as", "-n", ns, name(4)],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout);
      assert(out.success, new TextDecoder().decode(out.stderr));
      const [head, row] = text.trim().split("\n");
      const cols = head.split(/\s{2,}/);
      const cells = row.split(/\s{2,}/);
      assertEquals(cells[cols.indexOf("UP-TO-DATE")], "4", text);
      assertEquals(cells[cols.indexOf("AVAILABLE")], "4", text);
    });

    await t.step(
      "a never-Ready image keeps the old Pods serving, ends in ProgressDeadlineExceeded; reverting rolls back at once",
      async () => {
        const r = 2;
        const before = (await c.list<Pod>(PODS, {
          namespace: ns,
          labelSelector: `app.kubernetes.io/instance=${name(r)}`,
        })).items.map((p) => p.metadata!.uid!).sort();
        const lastGood = (await getAs(ns, name(r))).spec.image;
        await c.patch(AS, name(r), {
          spec: { image: IMAGE("never-1"), progressDeadlineSeconds: 6 },
        }, { namespace: ns });
        let minReady = Infinity;
        let availableFalse = 0;
        const t0 = Date.now();
        let exceeded: AppService | undefined;
        while (!exceeded) {
          assert(Date.now() - t0 < 40_000, "no ProgressDeadlineExceeded within 40 s");
          await sleep(SAMPLE_MS);
          const [a, ready] = await Promise.all([
            getAs(ns, name(r)),
            readyEndpoints(c, ns, name(r)),
          ]);
          minReady = Math.min(minReady, ready);
          if (cond(a, "Available")?.status !== "True") availableFalse++;
          if (
            a.status?.observedGeneration === a.metadata.generation &&
            cond(a, "Progressing")?.reason === "ProgressDeadlineExceeded"
          ) exceeded = a;
        }
        console.log(
          `never-Ready rollout: ProgressDeadlineExceeded after ${
            ((Date.now() - t0) / 1000).toFixed(1)
          } s, lowest ready endpoints ${minReady}`,
        );
        assertEquals(minReady, r, "the old Pods kept serving");
        assertEquals(availableFalse, 0, "Available stayed True");
        assertEquals(cond(exceeded, "Progressing")?.status, "False");
        assertEquals(cond(exceeded, "Ready")?.reason, "ImagePullBackOff");
        assertEquals(cond(exceeded, "Available")?.status, "True");
        const events = await waitFor("a Warning Event ProgressDeadlineExceeded", async () => {
          const l = (await c.list<KubeObject & { reason?: string; type?: string }>(EVENTS, {
            namespace: ns,
          })).items.filter((e) => e.reason === "ProgressDeadlineExceeded" && e.type === "Warning");
          return l.length > 0 ? l : undefined;
        }, 15_000);
        assertEquals(events.length, 1);

        const t1 = Date.now();
        await c.patch(AS, name(r), { spec: { image: lastGood } }, { namespace: ns });
        await waitFor("rolled back", async () => {
          const a = await getAs(ns, name(r));
          return rolledOut(a, r) && cond(a, "Progressing")?.reason === "Complete";
        }, 20_000);
        console.log(`rollback: Ready again after ${((Date.now() - t1) / 1000).toFixed(1)} s`);
        const after = (await c.list<Pod>(PODS, {
          namespace: ns,
          labelSelector: `app.kubernetes.io/instance=${name(r)}`,
        })).items.filter((p) => !p.metadata?.deletionTimestamp).map((p) => p.metadata!.uid!).sort();
        assertEquals(after, before, "the Pods that served are the ones kept");
      },
    );

    await t.step(
      "probes reach the container; an invalid probe is refused naming the field",
      async () => {
        const probe = { httpGet: { path: "/healthz", port: "http" }, periodSeconds: 2 };
        await c.patch(AS, name(1), { spec: { readinessProbe: probe } }, { namespace: ns });
        const pod = await waitFor("a Pod with the readiness probe", async () => {
          const l = await c.list<Pod>(PODS, {
            namespace: ns,
            labelSelector: `app.kubernetes.io/instance=${name(1)}`,
          });
          return l.items.find((p) =>
            p.spec?.containers[0].readinessProbe?.httpGet?.path === "/healthz"
          );
        }, 30_000);
        assertEquals(pod.spec!.containers[0].readinessProbe?.periodSeconds, 2);
        const err = await c.patch(AS, name(1), {
          spec: { livenessProbe: { exec: { command: ["true"] }, tcpSocket: { port: 8080 } } },
        }, { namespace: ns }).then(() => undefined, (e) => e as Error);
        assert(err, "a probe with two handlers was accepted");
        assert(
          err.message.includes("spec.livenessProbe") && err.message.includes("exactly one handler"),
          err.message,
        );
      },
    );
    await t.step(
      "a drain takes at most the budget: the PodDisruptionBudget the operator keeps",
      async () => {
        const budget = async (r: number) =>
          await c.get<KubeObject & { spec?: { maxUnavailable?: number | string } }>(PDBS, name(r), {
            namespace: ns,
          }).then((x) => x, (err) => {
            if (isNotFound(err)) return undefined;
            throw err;
          });
        const pdb4 = await waitFor("the PodDisruptionBudget of r4", () => budget(4), 15_000);
        assertEquals(pdb4.spec?.maxUnavailable, 1, "the rollout's maxUnavailable 0, at least 1");
        assertEquals(await budget(1), undefined, "one replica: no budget");
        const info = await cluster();
        let minReady = Infinity;
        const t0 = Date.now();
        const drain = new Deno.Command(`${info.binDir}/kubectl`, {
          args: [
            `--kubeconfig=${info.kubeconfig}`,
            "drain",
            node,
            `--pod-selector=app.kubernetes.io/instance=${name(4)}`,
            "--ignore-daemonsets",
            "--timeout=8s",
          ],
          stdout: "piped",
          stderr: "piped",
        }).output();
        let finished = false;
        drain.finally(() => finished = true);
        // Bounded by the drain's own timeout (8 s) and this loop's (30 s).
        while (!finished && Date.now() - t0 < 30_000) {
          minReady = Math.min(minReady, await readyEndpoints(c, ns, name(4)));
          await sleep(SAMPLE_MS);
        }
        const out = await drain;
        const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
        console.log(`drain of r4's Node: lowest ready endpoints ${minReady} of 4`);
        assert(!out.success, `the drain took every Pod:\n${text}`);
        assert(text.includes("disruption budget"), text);
        assertEquals(minReady, 3, "one Pod at a time, no more");
        // Uncordoned: the replacement is scheduled and the AppService is whole again.
        await c.patch(NODES, node, { spec: { unschedulable: null } }, { type: "merge" });
        await waitFor("r4 whole again", async () => {
          const a = await getAs(ns, name(4));
          return rolledOut(a, 4) && await readyEndpoints(c, ns, name(4)) === 4;
        }, 30_000);
        // Turned off: the budget goes.
        await c.patch(AS, name(4), { spec: { podDisruptionBudget: { enabled: false } } }, {
          namespace: ns,
        });
        await waitFor("r4's budget deleted", async () => await budget(4) === undefined, 15_000);
      },
    );
  } finally {
    await Promise.all(counters.map((k) => k.stop().catch(() => {})));
    const code = await op.stop();
    kubeletStop.abort();
    await kubelet;
    await removeTestNode(c, ns, node);
    await dropNamespace(ns);
    assertEquals(code, 0, "operator exit code");
  }
});
