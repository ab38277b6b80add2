/**
 * Request URLs (lib/kube/params.ts): the query parameters that have a value, form-encoded, exactly
 * as setting them one by one on `URL.searchParams` does.
 *
 * @module
 */
import fc from "fast-check";
import { assertEquals } from "../assert.ts";
import { type Query, requestUrl } from "../../lib/kube/params.ts";

/** The URL as `url.searchParams.set` builds it, parameter by parameter (the reference). */
function oneByOne(server: string, path: string, query: Query): string {
  const url = new URL(server + path);
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== "") url.searchParams.set(k, String(v));
  }
  return url.href;
}

Deno.test("requestUrl: the same URL as setting each parameter on searchParams", () => {
  const value = fc.oneof(
    fc.constant(undefined),
    fc.constant(""),
    fc.boolean(),
    fc.integer(),
    fc.string({ maxLength: 8 }),
    fc.constantFrom("app=a,tier in (x y)", "ç/é?&=#+%", "metadata.name!=x"),
  );
  fc.assert(
    fc.property(
      fc.constantFrom("https://127.0.0.1:6443", "https://[::1]:6443", "https://h:1/base"),
      fc.constantFrom("/api/v1/pods", "/apis/apps.our-org.com/v1/namespaces/a b/appservices"),
      fc.dictionary(fc.constantFrom("watch", "labelSelector", "limit", "continue", "x y"), value),
      (server, path, query) => {
        assertEquals(requestUrl(server, path, query).href, oneByOne(server, path, query));
      },
    ),
    { numRuns: 500 },
  );
  assertEquals(
    requestUrl("https://127.0.0.1:6443", "/api/v1/pods", { watch: true, limit: undefined }).href,
    "https://127.0.0.1:6443/api/v1/pods?watch=true",
  );
  assertEquals(requestUrl("https://127.0.0.1:6443", "/api", {}).href, "https://127.0.0.1:6443/api");
});
