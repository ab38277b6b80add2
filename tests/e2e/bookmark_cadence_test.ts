/**
 * The bookmark cadence as evidence of a dead watch (S14), on kube-apiserver's watch cache.
 *
 * The watch cache sends a watcher a BOOKMARK about every minute, and 2 s before its server-side
 * timeout, but only once its cache of that resource has moved past the resourceVersion the watch
 * started at: a bookmark at or below it is dropped. A watch reopened from the resourceVersion of
 * its last bookmark (a server timeout, an idle reconnect) on a resource that nobody writes
 * therefore gets no bookmark for as long as the resource stays unwritten, on a healthy path.
 *
 * Before, a reflector that had once received a bookmark took any silence past its idle bound for
 * a missed bookmark: it marked itself deaf, told the connection health that the path had failed,
 * dropped the pooled connections, and the recovery that followed (the next probe's answer)
 * restarted every other watch of the client as "stalled" — what a user saw as a burst of
 * `Watch restarted why=stalled` lines every few minutes on a quiet cluster.
 *
 * Here, at the default idle bound (75 s), against a second kube-apiserver that only this test
 * talks to: a reflector on PodTemplates (which nothing else in the test cluster writes) whose
 * first watch lasts 4 s (the apiserver's pre-timeout bookmark comes at 2 s) and whose later
 * watches last 80 s (longer than the idle bound), and a second reflector on the same client.
 * - Positive controls: the first stream received a bookmark past its start (this apiserver sends
 *   them, and the reflector saw them), the second stream received nothing, and the idle bound
 *   fired on it.
 * - The idle is quiet: not deaf, no failure episode of the connection health, no restart of the
 *   other reflector's watch, no relist; and the reflector is not deaf: an object created after
 *   the idle reaches its store within 5 s.
 *
 * Everything on 127.0.0.1; every wait bounded; the test stops what it started.
 */
import type { ConfigMap } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { KubeClient, type KubeObject } from "../../lib/kube/client.ts";
import { loadClusterConfig } from "../../lib/kube/config.ts";
import type { WatchOptions } from "../../lib/kube/params.ts";
import type { ObjectWatchEvent } from "../../lib/kube/watch.ts";
import { CONFIGMAPS, type ResourceType } from "../../lib/kube/resources.ts";
import { type SecondApiserver, startSecondApiserver } from "./apiserver2.ts";
import {
  admin,
  cluster,
  dropNamespace,
  installCrd,
  newNamespace,
  sleep,
  waitFor,
} from "./harness.ts";
import { startReflector } from "./reflectors.ts";

/**
 * PodTemplates: served from the watch cache, and nothing in the test cluster writes them, so
 * their cache moves only with this test's writes or when etcd reports progress (see the test).
 */
const PODTEMPLATES: ResourceType = {
  apiVersion: "v1",
  kind: "PodTemplate",
  plural: "podtemplates",
  namespaced: true,
};

/** One watch call of the recording client: what it asked for and what its stream carried. */
interface Recorded {
  resource: string;
  resourceVersion?: string;
  timeoutSeconds?: number;
  /** `TYPE@resourceVersion` of every frame, in order. */
  frames: string[];
}

/**
 * A KubeClient that records every watch and sets the server-side timeout of the quiet
 * resource's watches: 4 s for the first, {@link LONG_WATCH_S} for the rest.
 */
class RecordingClient extends KubeClient {
  readonly watches: Recorded[] = [];

  override async *watchBatches<T extends KubeObject>(
    rt: ResourceType,
    o: WatchOptions = {},
  ): AsyncGenerator<ObjectWatchEvent<T>[]> {
    const quiet = rt.plural === PODTEMPLATES.plural;
    const n = this.watches.filter((w) => w.resource === rt.plural).length;
    const timeoutSeconds = quiet ? (n === 0 ? 4 : LONG_WATCH_S) : o.timeoutSeconds;
    const rec: Recorded = {
      resource: rt.plural,
      resourceVersion: o.resourceVersion,
      timeoutSeconds,
      frames: [],
    };
    this.watches.push(rec);
    for await (const batch of super.watchBatches<T>(rt, { ...o, timeoutSeconds })) {
      for (const ev of batch) rec.frames.push(`${ev.type}@${ev.object.metadata?.resourceVersion}`);
      yield batch;
    }
  }
}

function podTemplate(ns: string, name: string): KubeObject {
  return {
    apiVersion: "v1",
    kind: "PodTemplate",
    metadata: { name, namespace: ns, labels: { [LABEL]: "yes" } },
    template: {
      metadata: { labels: { app: name } },
      spec: { containers: [{ name: "app", image: "nginx:1.27" }] },
    },
  } as KubeObject;
}

const LABEL = "cadence-e2e";

/** Server-side timeout of each quiet watch after the first (s): longer than the idle bound. */
const LONG_WATCH_S = 80;

Deno.test("bookmark cadence: a watch reopened on an unwritten resource gets no bookmark; its idle is quiet, not a failure, and restarts no other watch (S14)", async () => {
  const info = await cluster();
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("cadence");
  const dir = await Deno.makeTempDir({ prefix: "cadence-" });
  // An apiserver of its own, so that no other client's consistent read asks etcd for progress
  // (it moves the cache), and without its own two periodic reads of each resource's keys through the watch cache, each
  // of which waits for the cache to reach etcd's current revision and so moves it (and sends the
  // watches a bookmark): the object count for API Priority and Fairness
  // (`--etcd-count-metric-poll-period`, every minute) and the object size estimator's key cleanup
  // (`SizeBasedListCostEstimate`, beta and on in 1.36: every 60–90 s per resource,
  // k8s.io/apiserver pkg/storage/etcd3/stats.go). With them, most 80 s streams got a bookmark: on
  // a slower machine all six did, and the test timed out.
  const second: SecondApiserver = await startSecondApiserver(info, {
    logFile: `${dir}/kube-apiserver-2.log`,
    extraArgs: [
      "--etcd-count-metric-poll-period=0",
      "--feature-gates=SizeBasedListCostEstimate=false",
    ],
  });
  const config = await loadClusterConfig({ kubeconfig: info.kubeconfig });
  const client = new RecordingClient({ ...config, server: second.server }, {
    userAgent: `cadence-e2e-${crypto.randomUUID().slice(0, 8)}`,
  });
  // The namespace's kube-root-ca.crt is left out: the ConfigMap reflector caches nothing.
  const o = { namespace: ns, labelSelector: `${LABEL}=yes` };
  const templates = startReflector<KubeObject>(client, { ...o, resource: PODTEMPLATES }, {
    shared: true,
  });
  const others = startReflector<ConfigMap>(client, { ...o, resource: CONFIGMAPS }, {
    shared: true,
  });
  const streams = () => client.watches.filter((w) => w.resource === PODTEMPLATES.plural);
  try {
    await waitFor("watching PodTemplates", () => templates.reflector.openWatches === 1, 30_000, 20);
    // An event on the first stream moves the cache past its start: its pre-timeout bookmark
    // (about 2 s in) is sent.
    await c.create(PODTEMPLATES, podTemplate(ns, "a"));
    await waitFor("watching ConfigMaps", () => others.reflector.openWatches === 1, 30_000);
    const episodes = client.health.episodes;
    await waitFor("the second watch", () => streams().length >= 2, 30_000);
    // The cache may still move for a reason of its own (etcd's progress notification to an idle
    // watch, every 10 minutes by default): then that stream gets bookmarks and ends at its
    // timeout, and the next one is reopened from its last bookmark. Up to six long streams.
    const report = () =>
      streams().map((w) => `from ${w.resourceVersion} (${w.timeoutSeconds} s): [${w.frames}]`);
    await waitFor(
      "the idle bound on a reopened watch",
      () => templates.of("idle").length >= 1,
      6 * (LONG_WATCH_S * 1_000 + 5_000),
      500,
    ).catch((err) => {
      console.log(`podtemplates watches:\n  ${report().join("\n  ")}`);
      throw err;
    });
    // A failure of the path would be followed by a probe within about 3 s and its recovery.
    await sleep(6_000);
    const all = streams();
    const idleEvent = templates.of("idle")[0];
    const idled = all.findLast((w) => w.resourceVersion === idleEvent.resourceVersion)!;
    const before = all.slice(0, all.indexOf(idled));
    console.log(
      `podtemplates watches:\n  ${report().join("\n  ")}\nidle ${JSON.stringify(idleEvent)}; ` +
        `deaf ${JSON.stringify(templates.reflector.deaf)}; episodes ${episodes} -> ` +
        `${client.health.episodes}; other restarts ${JSON.stringify(others.of("restart"))}`,
    );
    // Positive controls: the apiserver sent this reflector bookmarks on an earlier stream, and
    // the stream that went idle received nothing.
    assert(
      before.some((w) =>
        w.frames.some((f) =>
          f.startsWith("BOOKMARK@") && Number(f.slice(9)) > Number(w.resourceVersion)
        )
      ),
      "no bookmark on a stream before the idle one",
    );
    assertEquals(idled.frames, [], "the stream that went idle had received frames");
    assertEquals(
      templates.of("idle").map((e) => e.quiet),
      [true],
      "the idle was taken for a failure",
    );
    assertEquals(templates.reflector.deaf, undefined, "marked deaf");
    assertEquals(client.health.episodes, episodes, "a failure of the path was reported");
    assertEquals(others.of("restart"), [], "another watch was restarted");
    assertEquals(templates.of("listed").length, 1, "relisted");
    assertEquals(others.of("listed").length, 1, "relisted");

    // Not deaf: a change made now reaches the store within 5 s.
    await c.create(PODTEMPLATES, podTemplate(ns, "b"));
    await waitFor(
      "b in the store",
      () => templates.store.get(`${ns}/b`) !== undefined,
      5_000,
      100,
    );
  } finally {
    await templates.stop();
    await others.stop();
    client.close();
    await second.stop();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
