/**
 * S19 up front, as a property against the real apiserver: for AppService specs generated with
 * fast-check (valid ones and near misses), every spec the CRD accepts gives a Pod and a Service —
 * built by the operator's own `desiredPod`/`desiredService` — that a server-side dry run
 * (`dryRun=All`) accepts; and the in-process validation (`validateSpec`) agrees with the CRD on
 * every spec.
 *
 * CI runs a fixed seed and a bounded count; `APPSERVICE_PROPERTY_RUNS` and
 * `APPSERVICE_PROPERTY_SEED` change them for longer runs (the figures are printed).
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
/** Specs per CI run (fixed seed): 5 to 15 s on the local control plane (2 shared cores). */
const DEFAULT_RUNS = 1000;
/** The CI seed. */
const DEFAULT_SEED = 19;
/** Specs in flight at once. */
const CONCURRENCY = 4;

interface Finding {
  spec: Record<string, unknown>;
  what: string;
}

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
  const specs = fc.sample(specArbitrary, { seed, numRuns: runs });
  const gaps: Finding[] = [];
  const disagreements: Finding[] = [];
  let accepted = 0;
  const started = Date.now();
  try {
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < specs.length; i = next++) {
        const spec = specs[i];
        let local: string[];
        try {
          local = validateSpec(spec).errors;
        } catch (err) {
          local = [`validateSpec threw: ${err}`];
        }
        let created: AppService | undefined;
        let refusal = "";
        try {
          created = await c.create<AppService>(AS, appService(ns, `p-${i}`, spec));
        } catch (err) {
          if (!(err instanceof ApiError) || err.code >= 500) throw err;
          refusal = errText(err);
        }
        if (!created !== (local.length > 0)) {
          disagreements.push({
            spec,
            what: created
              ? `CRD accepts, validateSpec refuses: ${local.join("; ")}`
              : `CRD refuses (${refusal}), validateSpec accepts`,
          });
        }
        if (!created) continue;
        accepted++;
        const pod = desiredPod(created, 0);
        const svc = desiredService(created);
        const problems: string[] = [];
        try {
          await c.create<Pod>(PODS, pod, { namespace: ns, dryRun: true });
        } catch (err) {
          problems.push(`Pod: ${errText(err)}`);
        }
        if (svc) {
          try {
            await c.create<Service>(SERVICES, svc, { namespace: ns, dryRun: true });
          } catch (err) {
            problems.push(`Service: ${errText(err)}`);
          }
        }
        if (problems.length) gaps.push({ spec, what: problems.join("; ") });
        await c.delete(AS, `p-${i}`, { namespace: ns }).catch(() => {});
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  } finally {
    await dropNamespace(ns);
  }
  const seconds = (Date.now() - started) / 1000;
  console.log(
    `S19 property: seed ${seed}, ${specs.length} specs, ${accepted} accepted by the CRD, ` +
      `${gaps.length} gaps (accepted, then refused by the Pod or Service API), ` +
      `${disagreements.length} disagreements with validateSpec, ${seconds.toFixed(1)} s`,
  );
  const show = (l: Finding[]) =>
    l.slice(0, 8).map((f) => `  ${JSON.stringify(f.spec)}\n    -> ${f.what}`).join("\n");
  assert(gaps.length === 0, `${gaps.length} gaps, e.g.:\n${show(gaps)}`);
  assert(
    disagreements.length === 0,
    `${disagreements.length} disagreements:\n${show(disagreements)}`,
  );
  assert(accepted >= specs.length / 5, `only ${accepted} of ${specs.length} accepted`);
});
