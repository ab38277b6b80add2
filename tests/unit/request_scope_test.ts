/**
 * The client's `requestScope` hook (lib/kube/transport.ts, `RequestScope.run`) when the hook
 * itself throws, against a loopback server that counts what reaches it: the hook's error reaches
 * the caller as it is (the same object), is not taken for a connection failure (no NetworkError,
 * the connection health stays healthy) and is not sent again; a `run` that calls `send` and then
 * throws aborts the request it started; a `run` that never calls `send` is a TypeError. Positive
 * control: a scope whose `run` calls `send` gets the answer, and the server counts it.
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { KubeClient } from "../../lib/kube/client.ts";
import { isNetworkError } from "../../lib/kube/errors.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import type { RequestInfo, RequestScope } from "../../lib/kube/transport.ts";

/** A loopback server answering every request with a ConfigMap; `seen` lists the requests. */
function server() {
  const seen: string[] = [];
  const s = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    seen.push(`${req.method} ${new URL(req.url).pathname}`);
    return Response.json({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c" } });
  });
  return { seen, url: `http://127.0.0.1:${s.addr.port}`, close: () => s.shutdown() };
}

/** A client of `url` with retries (5, the default) whose scopes' `run` is `run`. */
function clientWith(url: string, run: RequestScope["run"], ended: string[]): KubeClient {
  return new KubeClient({
    server: url,
    auth: { kind: "token", token: "t" },
    namespace: "default",
    source: "test",
  }, {
    requestScope: () => ({ run, end: (info: RequestInfo) => void ended.push(info.code) }),
  });
}

Deno.test("requestScope: an error of the hook's run reaches the caller unchanged, not retried, not a network failure", async () => {
  const s = server();
  const ended: string[] = [];
  let runs = 0;
  const hookError = new Error("the scope broke");
  const client = clientWith(s.url, () => {
    runs++;
    throw hookError;
  }, ended);
  try {
    const err = await assertRejects(() => client.get(CONFIGMAPS, "c", { namespace: "default" }));
    assert(err === hookError, `not the hook's error: ${err}`);
    assert(!isNetworkError(err));
    assertEquals([runs, s.seen, ended], [1, [], ["<error>"]]);
    assertEquals([client.health.healthy, client.health.failures], [true, 0]);
  } finally {
    client.close();
    await s.close();
  }
});

Deno.test("requestScope: a run that started the request and then threw aborts it; one that never sends is a TypeError", async () => {
  const s = server();
  const ended: string[] = [];
  let mode: "send-then-throw" | "no-send" | "ok" = "send-then-throw";
  let runs = 0;
  let started: unknown;
  const hookError = new Error("thrown after send");
  const client = clientWith(s.url, <T>(send: () => T): T => {
    runs++;
    if (mode === "no-send") return undefined as T;
    const p = send();
    if (mode === "send-then-throw") {
      started = p;
      throw hookError;
    }
    return p;
  }, ended);
  try {
    const err = await assertRejects(() => client.get(CONFIGMAPS, "c", { namespace: "default" }));
    assert(err === hookError, `not the hook's error: ${err}`);
    assertEquals([runs, ended], [1, ["<error>"]]);
    // The fetch run started was aborted (with the hook's error as the reason), not left running.
    assert(started instanceof Promise, "run did not start the request");
    const abort = await assertRejects(() => started as Promise<unknown>);
    assert(abort === hookError, `the started request ended otherwise: ${abort}`);

    mode = "no-send";
    const missing = await assertRejects(() => client.get(CONFIGMAPS, "c"));
    assert(missing instanceof TypeError && /without calling send/.test(missing.message));
    assertEquals(runs, 2);

    // Positive control: a run that calls send gets the answer.
    mode = "ok";
    const got = await client.get(CONFIGMAPS, "c", { namespace: "default" });
    assertEquals(got.metadata?.name, "c");
    assertEquals([runs, ended.at(-1)], [3, "200"]);
    assertEquals(client.health.failures, 0);
  } finally {
    client.close();
    await s.close();
  }
});
