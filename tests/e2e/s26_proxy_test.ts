/**
 * S26: proxies from the environment are applied as client-go applies them. Before, Deno's fetch
 * applied `HTTPS_PROXY` by itself: requests to a 127.0.0.1 apiserver went to the proxy, and with
 * the proxy dead the operator exited blaming the apiserver; and `NO_PROXY` silently overrode a
 * kubeconfig's explicit `proxy-url`.
 * - `HTTPS_PROXY` (and `https_proxy`, `HTTP_PROXY`) naming a dead 127.0.0.1 port: the loopback
 *   apiserver is reached directly (never proxied), the operator becomes ready, its `Connected`
 *   line says `direct`, and an AppService converges.
 * - A kubeconfig `proxy-url` naming a CONNECT proxy of the test, with `NO_PROXY=127.0.0.1` in the
 *   environment: the requests go through that proxy (client-go: `proxy-url` is not subject to
 *   NO_PROXY), counted by the proxy.
 * - A kubeconfig `proxy-url` naming a dead port: the start-up error names the proxy.
 *
 * Everything on 127.0.0.1; every wait bounded; the test stops what it started.
 */
import { assert, assertEquals } from "../assert.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import { ConnectProxy } from "./connect_proxy.ts";
import {
  admin,
  appService,
  dropNamespace,
  freePort,
  getAs,
  installCrd,
  kubeconfigFor,
  logsOf,
  newNamespace,
  type Operator,
  startOperator,
  waitFor,
} from "./harness.ts";

const AS = APPSERVICES as unknown as ResourceType;

Deno.test("S26: a loopback apiserver is reached directly with HTTPS_PROXY set to a dead proxy", async () => {
  await installCrd();
  const ns = await newNamespace("s26");
  const dead = `http://127.0.0.1:${freePort()}`;
  let op: Operator | undefined;
  try {
    op = await startOperator([], {
      HTTPS_PROXY: dead,
      https_proxy: dead,
      HTTP_PROXY: dead,
      http_proxy: dead,
    });
    await op.waitReady(60_000);
    const connected = logsOf(op, "Connected");
    assertEquals(connected.length, 1, "one Connected line");
    assert(
      String(connected[0].properties?.proxy).startsWith("direct"),
      `the Connected line names the direct connection: ${JSON.stringify(connected[0])}`,
    );
    const c = await admin();
    await c.create(AS, appService(ns, "web", { image: "nginx:1.27", replicas: 1 }));
    await waitFor("AppService web Ready", async () => {
      const a: AppService = await getAs(ns, "web");
      return a.status?.ready === true && a.status.readyReplicas === 1;
    }, 90_000);
  } finally {
    await op?.stop("SIGTERM", 20_000);
    await dropNamespace(ns);
  }
});

Deno.test("S26: a kubeconfig proxy-url carries the requests, NO_PROXY notwithstanding", async () => {
  await installCrd();
  const dir = await Deno.makeTempDir({ prefix: "s26-" });
  const proxy = new ConnectProxy();
  let op: Operator | undefined;
  try {
    const server = new URL((await admin()).config.server);
    const kubeconfig = await kubeconfigFor(server.origin, dir, (cfg) => {
      for (const cl of cfg.clusters) cl.cluster["proxy-url"] = proxy.url;
    });
    op = await startOperator([`--kubeconfig=${kubeconfig}`], { NO_PROXY: "127.0.0.1,localhost" });
    await op.waitReady(60_000);
    const target = `${server.hostname}:${server.port}`;
    assert(
      (proxy.tunnels.get(target) ?? 0) >= 1,
      `the proxy carried tunnels to ${target}: ${JSON.stringify([...proxy.tunnels])}`,
    );
    const connected = logsOf(op, "Connected");
    assert(
      String(connected[0]?.properties?.proxy).includes(proxy.url),
      `the Connected line names the proxy: ${JSON.stringify(connected[0])}`,
    );
  } finally {
    await op?.stop("SIGTERM", 20_000);
    await proxy.close();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("S26: a dead proxy is named in the start-up error", async () => {
  await installCrd();
  const dir = await Deno.makeTempDir({ prefix: "s26-" });
  const dead = `http://127.0.0.1:${freePort()}`;
  let op: Operator | undefined;
  try {
    const server = new URL((await admin()).config.server);
    const kubeconfig = await kubeconfigFor(server.origin, dir, (cfg) => {
      for (const cl of cfg.clusters) cl.cluster["proxy-url"] = dead;
    });
    op = await startOperator([`--kubeconfig=${kubeconfig}`]);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const code = await Promise.race([
      op.status.then((s) => s.code),
      new Promise<undefined>((r) => timer = setTimeout(() => r(undefined), 60_000)),
    ]);
    clearTimeout(timer);
    assert(code !== undefined && code !== 0, `the operator exits non-zero (got ${code})`);
    const stderr = op.stderr();
    assert(
      stderr.includes(`through proxy ${dead}`),
      `the error names the proxy ${dead}:\n${stderr.slice(-2000)}`,
    );
  } finally {
    await op?.stop("SIGTERM", 5_000);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
