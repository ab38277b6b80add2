/**
 * Layers only look down (docs/architecture.md): lib/kube imports nothing of lib/runtime, lib/appservice or
 * the entry points; lib/runtime nothing of lib/appservice or the entry points; lib/testing (the
 * local control plane, `./testing`) nothing but lib/kube; the example controllers under examples/
 * (and their tests) reach the library only through its entry modules (lib/kube/mod.ts,
 * lib/runtime/mod.ts, lib/testing/mod.ts), which is what makes them proof that the public surface
 * suffices. The import
 * specifiers (static `import`/`export ... from`, side-effect imports, dynamic `import("...")`) of
 * every .ts file under lib/ and examples/ are parsed and resolved against the file.
 */
import { assert, assertEquals } from "../assert.ts";

const REPO = new URL("../../", import.meta.url);
const LIB = new URL("lib/", REPO);

/** Every .ts file under `dir`, as URLs. */
function tsFiles(dir: URL): URL[] {
  const out: URL[] = [];
  for (const e of Deno.readDirSync(dir)) {
    const u = new URL(e.name + (e.isDirectory ? "/" : ""), dir);
    if (e.isDirectory) out.push(...tsFiles(u));
    else if (e.name.endsWith(".ts")) out.push(u);
  }
  return out;
}

/** Module specifiers a TypeScript source imports or re-exports (comments stripped first). */
export function importSpecifiers(source: string): string[] {
  const code = source
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
  const out: string[] = [];
  const patterns = [
    /\b(?:import|export)\s+(?:type\s+)?[^;"'`]*?\bfrom\s*["']([^"']+)["']/g,
    /\bimport\s*["']([^"']+)["']/g,
    /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
  ];
  for (const p of patterns) for (const m of code.matchAll(p)) out.push(m[1]);
  return out;
}

/** The layer (lib/<layer>/) a resolved URL is in; "top" for lib/*.ts, main.ts and the rest. */
function layerOf(u: URL): string {
  if (!u.href.startsWith(REPO.href)) return "external";
  const rel = u.href.slice(REPO.href.length);
  const m = /^lib\/([^/]+)\//.exec(rel);
  return m ? m[1] : "top";
}

/** What each layer may import (besides itself and external packages). */
const ALLOWED: Record<string, string[]> = {
  kube: [],
  runtime: ["kube"],
  testing: ["kube"],
};

Deno.test("layering: the import parser finds what a file imports", () => {
  const src = `
    // import { x } from "./commented.ts";
    /* export * from "./also-commented.ts"; */
    import type { A } from "../kube/client.ts";
    import {
      B,
      type C,
    } from "./b.ts";
    export { D } from "./d.ts";
    export * from "./e.ts";
    import "./side.ts";
    const f = await import("./f.ts");
    const url = "http://example.com/x"; // import { y } from "./trailing.ts"
  `;
  assertEquals(importSpecifiers(src).sort(), [
    "../kube/client.ts",
    "./b.ts",
    "./d.ts",
    "./e.ts",
    "./f.ts",
    "./side.ts",
  ]);
});

Deno.test("layering: lib/kube, lib/runtime and lib/testing import nothing from the layers above them", () => {
  const violations: string[] = [];
  let checked = 0;
  for (const file of tsFiles(LIB)) {
    const layer = layerOf(file);
    const allowed = ALLOWED[layer];
    if (!allowed) continue;
    for (const spec of importSpecifiers(Deno.readTextFileSync(file))) {
      if (!spec.startsWith(".") && !spec.startsWith("/")) continue; // a package
      const target = layerOf(new URL(spec, file));
      checked++;
      if (target !== layer && !allowed.includes(target)) {
        violations.push(`${file.href.slice(REPO.href.length)} imports ${spec} (layer ${target})`);
      }
    }
  }
  // The runtime imports the client, so a parser that found nothing would fail here.
  assert(checked > 20, `only ${checked} relative imports found under lib/kube and lib/runtime`);
  // lib/testing's client comes from lib/kube: a parser that missed it would pass vacuously.
  assert(
    tsFiles(new URL("testing/", LIB)).some((f) =>
      importSpecifiers(Deno.readTextFileSync(f)).includes("../kube/mod.ts")
    ),
    "no import of ../kube/mod.ts found under lib/testing",
  );
  assertEquals(violations, []);
});

Deno.test("layering: examples import the library only through its entry modules", () => {
  const entries = ["lib/kube/mod.ts", "lib/runtime/mod.ts", "lib/testing/mod.ts"].map((p) =>
    new URL(p, REPO).href
  );
  const violations: string[] = [];
  let checked = 0;
  for (const file of tsFiles(new URL("examples/", REPO))) {
    for (const spec of importSpecifiers(Deno.readTextFileSync(file))) {
      if (!spec.startsWith(".") && !spec.startsWith("/")) continue;
      const target = new URL(spec, file);
      if (!target.href.startsWith(LIB.href)) continue; // the example's own modules
      checked++;
      if (!entries.includes(target.href)) {
        violations.push(`${file.href.slice(REPO.href.length)} imports ${spec}`);
      }
    }
  }
  assert(checked >= 2, `only ${checked} library imports found under examples/`);
  assertEquals(violations, []);
});
