/**
 * S19 up front, as a property against the real apiserver: for AppService specs generated with
 * fast-check (valid ones and near misses), every spec the CRD accepts gives a Pod and a Service —
 * built by the operator's own `desiredPod`/`desiredService` — that a server-side dry run
 * (`dryRun=All`) accepts; and the in-process validation (`validateSpec`) agrees with the CRD on
 * every spec.
 *
 * `fc.assert` with a fixed seed and 1,000 runs in CI; a failure is shrunk to the smallest spec
 * that still fails. `APPSERVICE_PROPERTY_RUNS` and `APPSERVICE_PROPERTY_SEED` change them for
 * longer runs or a replay (the figures are printed).
 */
import fc from "fast-check";
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import { assert } from "../assert.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import { PODS, type ResourceType, SERVICES } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES, validateSpec } from "../../lib/appservice/schema.ts";
import { desiredPod } from "../../lib/appservice/pods.ts";
import { desiredService } from "../../lib/appservice/service.ts";
import { specArbitrary } from "../fixtures/spec_arbitrary.ts";
import { admin, appService, dropNamespace, installCrd, newNamespace } from "./harness.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** Specs per CI run (fixed seed), one at a time. */
const DEFAULT_RUNS = 1000;
/** The CI seed. */
const DEFAULT_SEED = 19;
function errText(err: unknown): string {
  return err instanceof ApiError
    ? `${err.code} ${err.reason}: ${err.status?.message}`
    : String(err);
}

Deno.test("S19: every spec the CRD accepts gives a Pod and a Service the apiserver accepts", async () => {
  const runs = Number(Deno.env.get("APPSERVICE_PROPERTY_RUNS") ?? DEFAULT_RUNS);
  const seed = Number(Deno.env.get("APPSERVICE_PROPERTY_SEED") ?? DEFAULT_SEED);
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("s19prop");
  let n = 0; // every run (shrinking included) creates its own AppService
  let firstRuns = 0;
  let accepted = 0;
  const started = Date.now();
  // One spec per run; a failing spec is shrunk to the smallest one that still fails, which
  // fast-check reports with the seed and path that replay it.
  const property = fc.asyncProperty(specArbitrary, async (spec) => {
    const name = `p-${n++}`;
    const counting = firstRuns < runs;
    if (counting) firstRuns++;
    let local: string[];
    try {
      local = validateSpec(spec).errors;
    } catch (err) {
      local = [`validateSpec threw: ${err}`];
    }
    let created: AppService | undefined;
    let refusal = "";
    try {
      created = await c.create<AppService>(AS, appService(ns, name, spec));
    } catch (err) {
      if (!(err instanceof ApiError) || err.code >= 500) throw err;
      refusal = errText(err);
    }
    try {
      assert(
        !created === (local.length > 0),
        created
          ? `CRD accepts, validateSpec refuses: ${local.join("; ")}`
          : `CRD refuses (${refusal}), validateSpec accepts`,
      );
      if (!created) return;
      if (counting) accepted++;
      const problems: string[] = [];
      try {
        await c.create<Pod>(PODS, desiredPod(created, 0), { namespace: ns, dryRun: true });
      } catch (err) {
        problems.push(`Pod: ${errText(err)}`);
      }
      const svc = desiredService(created);
      if (svc) {
        try {
          await c.create<Service>(SERVICES, svc, { namespace: ns, dryRun: true });
        } catch (err) {
          problems.push(`Service: ${errText(err)}`);
        }
      }
      assert(problems.length === 0, `accepted, then refused: ${problems.join("; ")}`);
    } finally {
      if (created) await c.delete(AS, name, { namespace: ns }).catch(() => {});
    }
  });
  try {
    await fc.assert(property, { seed, numRuns: runs });
  } finally {
    await dropNamespace(ns);
  }
  console.log(
    `S19 property: seed ${seed}, ${firstRuns} specs, ${accepted} accepted by the CRD, ` +
      `${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  assert(accepted >= firstRuns / 5, `only ${accepted} of ${firstRuns} accepted`);
});
