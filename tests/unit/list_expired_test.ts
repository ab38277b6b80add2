/**
 * Issue 25 (S25), at unit level: a paged list whose continue token expires (410 on a later page)
 * falls back to one full list, as client-go's pager does; and ConnectionHealth's one report per
 * outage (`claimReport`).
 */
import { assert, assertEquals } from "../assert.ts";
import { KubeClient, type KubeObject, type ObjectList } from "../../lib/kube/client.ts";
import { ConnectionHealth } from "../../lib/kube/connection.ts";
import { PODS } from "../../lib/kube/resources.ts";
import { FakeServer } from "./fakeapi.ts";

const pod = (name: string, rv: string): KubeObject => ({
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name, namespace: "ns", resourceVersion: rv },
});

/** Page 1 (a, b) with a continue token; page 2 answers 410; the full list holds b, c. */
function expiringServer(): { server: FakeServer; queries: URLSearchParams[] } {
  const server = new FakeServer();
  const queries: URLSearchParams[] = [];
  server.handler = (req, path) => {
    if (!path.endsWith("/pods")) return undefined;
    const q = new URL(req.url).searchParams;
    queries.push(q);
    if (q.get("continue")) {
      return Response.json({
        kind: "Status",
        code: 410,
        reason: "Expired",
        message: "The provided continue parameter is too old",
      }, { status: 410 });
    }
    if (q.get("limit")) {
      return Response.json({
        kind: "PodList",
        metadata: { resourceVersion: "10", continue: "c1" },
        items: [pod("a", "5"), pod("b", "6")],
      });
    }
    return Response.json({
      kind: "PodList",
      metadata: { resourceVersion: "20" },
      items: [pod("b", "15"), pod("c", "16")],
    });
  };
  return { server, queries };
}

Deno.test("listPages: an expired continue token falls back to one full list", async () => {
  const { server, queries } = expiringServer();
  const client = new KubeClient(server.config(), { maxRetries: 0, proxyEnvironment: { raw: {} } });
  try {
    const pages: ObjectList<KubeObject>[] = [];
    let expired = 0;
    const r = await client.listPages(
      PODS,
      { namespace: "ns", limit: 2, labelSelector: "x=y" },
      (p) => {
        pages.push(p);
      },
      () => expired++,
    );
    assertEquals(expired, 1);
    assertEquals(pages.length, 2, "page 1, then the full list");
    assertEquals(pages[1].items.map((i) => i.metadata?.name), ["b", "c"]);
    assertEquals(r, { resourceVersion: "20", pages: 2, items: 2, expired: true });
    assertEquals(queries.length, 3);
    // The full list: no limit, no continue, the caller's selector kept.
    assertEquals(queries[2].get("limit"), null);
    assertEquals(queries[2].get("continue"), null);
    assertEquals(queries[2].get("labelSelector"), "x=y");

    const all = await client.listAll(PODS, { namespace: "ns", limit: 2 });
    assertEquals(all.items.map((i) => i.metadata?.name), ["b", "c"], "no item of the old page");
    assertEquals(all.resourceVersion, "20");
  } finally {
    client.close();
    await server.close();
  }
});

Deno.test("listPages: a 410 on the first page is the caller's (no fallback)", async () => {
  const server = new FakeServer();
  server.handler = (_req, path) =>
    path.endsWith("/pods")
      ? Response.json({ kind: "Status", code: 410, reason: "Expired" }, { status: 410 })
      : undefined;
  const client = new KubeClient(server.config(), { maxRetries: 0, proxyEnvironment: { raw: {} } });
  try {
    let thrown: unknown;
    try {
      await client.listPages(PODS, { namespace: "ns" }, () => {}, () => {
        throw new Error("no fallback expected");
      });
    } catch (err) {
      thrown = err;
    }
    assertEquals((thrown as { code?: number })?.code, 410);
    assertEquals(server.count("GET", "/pods"), 1);
  } finally {
    client.close();
    await server.close();
  }
});

Deno.test("ConnectionHealth.claimReport: one report per failing episode, and its recovery is reported", () => {
  const h = new ConnectionHealth({
    timers: { now: () => 0, setTimer: () => 0, clearTimer: () => {} },
  });
  const events: string[] = [];
  h.onEvent((ev) => events.push(ev.type === "recovered" ? `recovered:${ev.reported}` : ev.type));
  assertEquals(h.claimReport(), false, "nothing to report while healthy");
  h.failed(new Error("tcp connect error"));
  h.failed(new Error("tcp connect error"));
  assertEquals(h.claimReport(), true);
  assertEquals(h.claimReport(), false);
  assertEquals(h.claimReport(), false);
  h.succeeded(1); // a request sent after the failure
  assertEquals(events, ["failing", "recovered:true"]);
  // A new episode has its own report; one nobody claimed recovers quietly.
  h.failed(new Error("reset"));
  h.succeeded(1); // a request sent after the failure
  h.failed(new Error("reset"));
  assert(h.claimReport());
  assertEquals(events.slice(2), ["failing", "recovered:false", "failing"]);
  h.close();
});
