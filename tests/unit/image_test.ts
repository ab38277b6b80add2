/**
 * The `deno run` image's program layout (scripts/image_app.ts): deno.json and deno.lock trimmed to
 * the npm packages the program loads, integrity hashes unchanged; and the real lockfile trimmed to
 * main.ts's packages still names every package of the closure.
 */
import { assert, assertEquals } from "../assert.ts";
import {
  type DenoLock,
  lockPackageName,
  npmName,
  reached,
  trimConfig,
} from "../../scripts/image_app.ts";

const REPO = new URL("../../", import.meta.url).pathname;

Deno.test("npmName and lockPackageName read npm specifiers and lockfile ids", () => {
  assertEquals(npmName("npm:yaml@2.9.1"), "yaml");
  assertEquals(npmName("npm:/kubernetes-types@1.30.0/"), "kubernetes-types");
  assertEquals(npmName("npm:@logtape/logtape@2.4.2"), "@logtape/logtape");
  assertEquals(npmName("jsr:@std/assert@1"), undefined);
  assertEquals(npmName("./lib/x.ts"), undefined);
  assertEquals(lockPackageName("yaml@2.9.1"), "yaml");
  assertEquals(lockPackageName("@jsep-plugin/regex@1.1.0_jsep@1.6.0"), "@jsep-plugin/regex");
});

Deno.test("trimConfig keeps only the program's packages, integrity unchanged", () => {
  const lock: DenoLock = {
    version: "5",
    specifiers: { "npm:a@1.0.0": "1.0.0", "npm:big@2.0.0": "2.0.0" },
    npm: {
      "a@1.0.0": { integrity: "sha512-a", dependencies: ["dep"] },
      "dep@3.0.0": { integrity: "sha512-dep" },
      "big@2.0.0": { integrity: "sha512-big", dependencies: ["huge"] },
      "huge@9.0.0": { integrity: "sha512-huge" },
    },
    workspace: { dependencies: ["npm:a@1.0.0", "npm:big@2.0.0"] },
  };
  const config = {
    name: "x",
    imports: { "a": "npm:a@1.0.0", "big": "npm:big@2.0.0", "local/": "./lib/" },
  };
  const out = trimConfig(config, lock, new Set(["a"]), new Set(["a@1.0.0", "dep@3.0.0"]));
  assertEquals(out.config, { name: "x", imports: { "a": "npm:a@1.0.0", "local/": "./lib/" } });
  assertEquals(out.lock, {
    version: "5",
    specifiers: { "npm:a@1.0.0": "1.0.0" },
    npm: {
      "a@1.0.0": { integrity: "sha512-a", dependencies: ["dep"] },
      "dep@3.0.0": { integrity: "sha512-dep" },
    },
    workspace: { dependencies: ["npm:a@1.0.0"] },
  });
  // The inputs are not changed.
  assertEquals(Object.keys(lock.npm!).length, 4);
});

Deno.test("reached: local files, imported packages and their dependency closure", () => {
  const r = reached({
    modules: [
      { specifier: "file:///src/main.ts", kind: "esm" },
      { specifier: "npm:/a@1.0.0", kind: "npm", npmPackage: "a@1.0.0" },
    ],
    npmPackages: {
      "a@1.0.0": { name: "a", version: "1.0.0", dependencies: ["dep@3.0.0"] },
      "dep@3.0.0": { name: "dep", version: "3.0.0", dependencies: ["a@1.0.0"] },
      "big@2.0.0": { name: "big", version: "2.0.0" },
    },
  });
  assertEquals(r.files, ["/src/main.ts"]);
  assertEquals([...r.roots], ["a"]);
  assertEquals([...r.closure].sort(), ["a@1.0.0", "dep@3.0.0"]);
});

Deno.test("the project's deno.lock trimmed to main.ts's packages stays consistent", async () => {
  const lock = JSON.parse(await Deno.readTextFile(`${REPO}deno.lock`)) as DenoLock;
  const config = JSON.parse(await Deno.readTextFile(`${REPO}deno.json`));
  const roots = new Set(["yaml", "prom-client"]);
  const closure = new Set(
    Object.keys(lock.npm!).filter((id) =>
      ["yaml", "prom-client", "tdigest", "bintrees", "@opentelemetry/api"].includes(
        lockPackageName(id),
      )
    ),
  );
  const out = trimConfig(config, lock, roots, closure);
  assertEquals(Object.values(out.config.imports!).sort(), [
    config.imports["prom-client"],
    config.imports["yaml"],
  ]);
  for (const [id, entry] of Object.entries(out.lock.npm!)) {
    assertEquals(entry.integrity, lock.npm![id].integrity);
    for (const dep of entry.dependencies ?? []) {
      assert(
        Object.keys(out.lock.npm!).some((k) => lockPackageName(k) === dep),
        `${id} depends on ${dep}, which was left out`,
      );
    }
  }
  assertEquals(out.lock.workspace?.dependencies?.length, 2);
});
