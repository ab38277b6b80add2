/**
 * The apiserver's refusal by deploy/'s Lease-holder admission policy (issue 25, S23) is a fenced
 * write: recognized from the 403 the apiserver answers (the policy's message inside the
 * apiserver's), turned into a FencedError (reason NotLeaseHolder), and requeued by the controller
 * as an expected outcome, not a reconcile error. Another 403 (RBAC, another policy) stays an
 * ApiError. The real apiserver's answer is checked end to end in tests/e2e/s23_server_fence_test.ts.
 */
import { assert, assertEquals } from "../assert.ts";
import {
  ApiError,
  fencedByServer,
  FencedError,
  isFenced,
  isLeaseHolderRefusal,
  LEASE_FENCE_PHRASE,
} from "../../lib/kube/errors.ts";
import { defaultErrorPolicy } from "../../lib/runtime/controller.ts";

/** The form of kube-apiserver's message for a ValidatingAdmissionPolicy's Deny. */
const refusal = (policyMessage: string) =>
  new ApiError(403, {
    kind: "Status",
    status: "Failure",
    reason: "Forbidden",
    code: 403,
    message: 'appservices.apps.our-org.com "a" is forbidden: ' +
      "ValidatingAdmissionPolicy 'appservice-operator-lease-holder' with binding " +
      `'appservice-operator-lease-holder' denied request: ${policyMessage}`,
  }, { request: "PATCH /apis/apps.our-org.com/v1/namespaces/ns/appservices/a/status" });

Deno.test("server fence: the Lease-holder policy's 403 is a FencedError (NotLeaseHolder)", () => {
  const err = refusal(
    `${LEASE_FENCE_PHRASE}: Pod 'op-1' is not the holder of Lease appservice-system/x ` +
      "(held by 'op-2_abc')",
  );
  assert(isLeaseHolderRefusal(err));
  const fenced = fencedByServer(err);
  assert(fenced instanceof FencedError && isFenced(fenced), String(fenced));
  assertEquals(fenced.reason, "NotLeaseHolder");
  assertEquals(fenced.request, err.request);
  assertEquals(fenced.apiError, err);
  assert(fenced.message.includes("refused by the apiserver: not the Lease holder"), fenced.message);
  const d = defaultErrorPolicy(fenced);
  assert(d?.next.kind === "backoff" && d.expected, JSON.stringify(d));
  assertEquals(
    d.expected.message,
    "Write refused by the apiserver: not the Lease holder; requeued",
  );
});

Deno.test("server fence: other 403s stay API errors", () => {
  const rbac = new ApiError(403, {
    reason: "Forbidden",
    code: 403,
    message: 'pods is forbidden: User "x" cannot create resource "pods"',
  });
  assert(!isLeaseHolderRefusal(rbac));
  assertEquals(fencedByServer(rbac), rbac);
  const otherPolicy = refusal("images must come from the company registry");
  assert(!isLeaseHolderRefusal(otherPolicy));
  assertEquals(fencedByServer(otherPolicy), otherPolicy);
  // The phrase alone, in a message that is not a policy's, is not enough.
  assert(!isLeaseHolderRefusal(new ApiError(403, { message: `x: ${LEASE_FENCE_PHRASE}` })));
  assert(
    !isLeaseHolderRefusal(
      new ApiError(422, { message: `ValidatingAdmissionPolicy 'a' ${LEASE_FENCE_PHRASE}` }),
    ),
  );
});
