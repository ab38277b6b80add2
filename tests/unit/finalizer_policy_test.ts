/**
 * The start-up check of deploy/finalizer_policy.yaml (lib/appservice/policy.ts): `yes` only when
 * the policy adds the finalizer and its binding binds it, `scoped` with matchResources; `no` when
 * one is missing or does something else; `unknown` when forbidden or failed; never a throw.
 */
import { assertEquals } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";
import {
  FINALIZER_POLICY_NAME,
  finalizerPolicyState,
  MUTATING_ADMISSION_POLICIES,
} from "../../lib/appservice/policy.ts";
import { readFinalizerPolicy } from "../cluster/finalizer_policy.ts";

type Answer = KubeObject | ApiError | Error;

/** A client whose `get` answers per resource kind (policy, binding). */
function client(policy: Answer, binding: Answer): KubeClient {
  return {
    get: (rt: ResourceType, name: string) => {
      assertEquals(name, FINALIZER_POLICY_NAME);
      const a = rt.kind === MUTATING_ADMISSION_POLICIES.kind ? policy : binding;
      return a instanceof Error ? Promise.reject(a) : Promise.resolve(a);
    },
  } as unknown as KubeClient;
}

const notFound = () => new ApiError(404, { reason: "NotFound", message: "not found" });
const forbidden = () => new ApiError(403, { reason: "Forbidden", message: "forbidden" });

Deno.test("finalizer policy state: deploy/'s objects are in force; a namespaceSelector is scoped", async () => {
  const { policy, binding } = await readFinalizerPolicy();
  assertEquals(await finalizerPolicyState(client(policy, binding)), {
    inForce: "yes",
    scoped: false,
  });
  const scoped = { ...binding, spec: { ...binding.spec, matchResources: {} } };
  assertEquals(await finalizerPolicyState(client(policy, scoped)), {
    inForce: "yes",
    scoped: true,
  });
});

Deno.test("finalizer policy state: missing, other policy, forbidden, failed", async () => {
  const { policy, binding } = await readFinalizerPolicy();
  const missing = await finalizerPolicyState(client(notFound(), binding));
  assertEquals(missing.inForce, "no");
  const noBinding = await finalizerPolicyState(client(policy, notFound()));
  assertEquals(noBinding.inForce, "no");
  const other = { ...binding, spec: { ...binding.spec, policyName: "other" } };
  assertEquals((await finalizerPolicyState(client(policy, other))).inForce, "no");
  const noMutation = { ...policy, spec: { ...policy.spec, mutations: [] } };
  assertEquals((await finalizerPolicyState(client(noMutation, binding))).inForce, "no");
  const denied = await finalizerPolicyState(client(forbidden(), forbidden()));
  assertEquals(denied.inForce, "unknown");
  assertEquals(
    "reason" in denied && denied.reason.includes("forbidden: get mutatingadmissionpolicies"),
    true,
  );
  const failed = await finalizerPolicyState(client(new Error("connection refused"), binding));
  assertEquals(failed.inForce, "unknown");
});
