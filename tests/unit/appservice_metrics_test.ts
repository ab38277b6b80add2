/**
 * The product's gauge of AppServices by namespace and readiness (lib/appservice/controller.ts):
 * what `countByReady` counts, and that the registered gauge serves it under its name.
 *
 * @module
 */
import { assert, assertEquals } from "../assert.ts";
import {
  addAppServiceMetrics,
  APPSERVICES_METRIC,
  countByReady,
} from "../../lib/appservice/controller.ts";
import { Metrics } from "../../lib/runtime/metrics.ts";
import type { AppService } from "../../lib/appservice/schema.ts";

/** An AppService in `namespace` whose status.ready is `ready` (none when undefined). */
const as = (namespace: string, ready?: boolean) =>
  ({
    metadata: { namespace, name: "x" },
    spec: {},
    ...(ready === undefined ? {} : { status: { ready } }),
  }) as unknown as AppService;

Deno.test("countByReady: by namespace, not yet reconciled counts as not ready, both values given", () => {
  const got = countByReady([as("a", true), as("a", false), as("a"), as("b", true)]);
  assertEquals(got, [
    [{ namespace: "a", ready: "true" }, 1],
    [{ namespace: "a", ready: "false" }, 2],
    [{ namespace: "b", ready: "true" }, 1],
    [{ namespace: "b", ready: "false" }, 0],
  ]);
  assertEquals(countByReady([]), []);
});

Deno.test("addAppServiceMetrics: the gauge reads the cache at each scrape", async () => {
  const m = new Metrics();
  let cache = [as("shop", false)];
  addAppServiceMetrics(m, () => cache);
  let text = await m.text();
  assert(text.includes(`${APPSERVICES_METRIC}{namespace="shop",ready="false"} 1`), text);
  cache = [as("shop", true)];
  text = await m.text();
  assert(text.includes(`${APPSERVICES_METRIC}{namespace="shop",ready="false"} 0`), text);
  assert(text.includes(`${APPSERVICES_METRIC}{namespace="shop",ready="true"} 1`), text);
});
