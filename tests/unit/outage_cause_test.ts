/**
 * The error of a reconcile whose writes failed because the apiserver could not be reached keeps
 * that cause (lib/appservice/report.ts `outageCause`), so the controller logs it as part of the
 * outage (one line per outage) even when the reconcile ends after the path came back.
 *
 * @module
 */
import { assert, assertEquals } from "../assert.ts";
import { ApiError, UnreachableError } from "../../lib/kube/errors.ts";
import { ConnectionHealth, isUnreachable } from "../../lib/kube/connection.ts";
import { unreachable } from "../../lib/runtime/controller.ts";
import { type Failure, outageCause } from "../../lib/appservice/report.ts";

const down = () =>
  new UnreachableError("POST /api/v1/namespaces/ns/pods", "h:1", undefined, "refused");
const refused = () => new ApiError(422, { reason: "Invalid", code: 422, message: "bad" });

Deno.test("outageCause: every failure reported now is unreachable → its cause; else none", () => {
  const u1 = down();
  const f = (cause: unknown, held = false): Failure => ({
    reason: "FailedCreatePod",
    message: "Pod web-0: ...",
    cause,
    held,
  });
  assertEquals(outageCause([f(u1), f(down())]), u1);
  // A held failure (reported earlier) does not count either way.
  assertEquals(outageCause([f(refused(), true), f(u1)]), u1);
  assertEquals(outageCause([f(u1), f(refused())]), undefined, "one failure of another kind");
  assertEquals(outageCause([f(u1), { reason: "PodNameConflict", message: "x" }]), undefined);
  assertEquals(outageCause([]), undefined);
  assertEquals(outageCause([f(u1, true)]), undefined);
});

Deno.test("a reconcile error with an unreachable cause counts as the outage's after the path is back", () => {
  const health = new ConnectionHealth();
  assert(health.healthy, "the path answered again");
  const err = new Error("Pod web-0: unreachable", {
    cause: outageCause([{ reason: "FailedCreatePod", message: "m", cause: down() }]),
  });
  assert(isUnreachable(err));
  assert(unreachable(err, health), "told apart from other errors while the path is healthy");
  // Positive control: without the cause it is an error of its own once the path is healthy.
  assert(!unreachable(new Error("Pod web-0: unreachable"), health));
  health.close?.();
});
