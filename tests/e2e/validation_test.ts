/**
 * The apiserver rejects invalid AppServices with 422 naming the field, and applies defaults (S10).
 * No operator needed: this is the CRD's schema at work.
 */
import { assert, assertEquals } from "../assert.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import { IMAGE_CASES } from "../unit/schema_test.ts";
import { ACCEPTED_SPECS, REFUSED_SPECS } from "../unit/rules_test.ts";
import { admin, appService, dropNamespace, installCrd, newNamespace } from "./harness.ts";

Deno.test("validation: invalid AppServices get 422 naming the field; defaults applied", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("valid");
  try {
    const cases: [string, Record<string, unknown>, string][] = [
      ["image without tag", { image: "nginx" }, "spec.image"],
      ["replicas 0", { image: "nginx:1", replicas: 0 }, "spec.replicas"],
      ["replicas 11", { image: "nginx:1", replicas: 11 }, "spec.replicas"],
      ['replicas "3"', { image: "nginx:1", replicas: "3" }, "spec.replicas"],
      [
        "restartPolicy Sometimes",
        { image: "nginx:1", restartPolicy: "Sometimes" },
        "spec.restartPolicy",
      ],
      ["no image", { replicas: 2 }, "spec.image"],
      [
        "port 0",
        { image: "nginx:1", ports: [{ containerPort: 0 }] },
        "spec.ports[0].containerPort",
      ],
      [
        "bad quantity",
        { image: "nginx:1", resources: { limits: { cpu: "lots" } } },
        "spec.resources.limits[cpu]",
      ],
      ...REFUSED_SPECS,
    ];
    for (const [what, spec, field] of cases) {
      await t.step(`rejects ${what}`, async () => {
        try {
          await c.create(APPSERVICES as never, appService(ns, "bad", spec));
        } catch (err) {
          assert(err instanceof ApiError, String(err));
          assertEquals(err.code, 422);
          assertEquals(err.reason, "Invalid");
          if (Deno.env.get("APPSERVICE_SHOW_422")) console.log(`${what}: ${err.status?.message}`);
          const fields = err.status?.details?.causes?.map((x) => x.field) ?? [];
          assert(
            fields.includes(field) || err.message.includes(field),
            `${field} not named: ${err.message}`,
          );
          if (field === "spec.image" && spec.image) {
            assert(err.message.includes("must be an image reference"), err.message);
            assert(!err.message.includes("(?:"), `regular expression shown: ${err.message}`);
          }
          return;
        }
        throw new Error(`${what} was accepted`);
      });
    }

    await t.step("specs at the edge that Pods and Services accept are accepted", async () => {
      for (const [i, spec] of ACCEPTED_SPECS.entries()) {
        await c.create(APPSERVICES as never, appService(ns, `edge-${i}`, spec));
        await c.delete(APPSERVICES as never, `edge-${i}`, { namespace: ns });
      }
    });

    await t.step("names that cannot name a Service or label a Pod are refused", async () => {
      for (const name of ["a".repeat(64), "my.app", "9lives"]) {
        try {
          await c.create(APPSERVICES as never, appService(ns, name, { image: "nginx:1" }));
        } catch (err) {
          assert(err instanceof ApiError && err.code === 422, String(err));
          // The field is named (it read `<nil>: Invalid value` when the rule sat at the root).
          assert(err.message.includes("metadata.name: Invalid value"), err.message);
          assert(err.message.includes("must be at most 63 characters"), err.message);
          assert(!err.message.includes("<nil>"), err.message);
          continue;
        }
        throw new Error(`${name} was accepted`);
      }
    });

    await t.step("only an image: replicas 1 and restartPolicy Always by default", async () => {
      const created = await c.create<AppService>(
        APPSERVICES as never,
        appService(ns, "minimal", { image: "nginx:1" }),
      );
      assertEquals(created.spec.replicas, 1);
      assertEquals(created.spec.restartPolicy, "Always");
    });

    await t.step("image references: the apiserver agrees with the shared table", async () => {
      for (const [i, [image, ok]] of IMAGE_CASES.entries()) {
        const name = `img-${i}`;
        let accepted = true;
        try {
          await c.create(APPSERVICES as never, appService(ns, name, { image }), { namespace: ns });
        } catch (err) {
          assert(err instanceof ApiError && err.code === 422, String(err));
          accepted = false;
        }
        assertEquals(accepted, ok, `${image}: expected ${ok ? "accepted" : "rejected"}`);
      }
    });
  } finally {
    await dropNamespace(ns);
  }
});
