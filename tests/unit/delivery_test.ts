/**
 * Delivery invariants that need no container engine or cluster: the Dockerfile's stages, base
 * images, user and entrypoint; the compile task's flags equal `deno task start`'s; the deploy
 * manifests' security settings; the README documents every flag.
 */
import { parseAllDocuments } from "yaml";
import { assert, assertEquals } from "../assert.ts";
import { FLAGS } from "../../lib/cli.ts";

const REPO = new URL("../../", import.meta.url).pathname;
const read = (p: string) => Deno.readTextFileSync(`${REPO}${p}`);
const denoVersion = /DENO_VERSION=([0-9.]+)/.exec(read("scripts/ensure-deno.sh"))![1];

Deno.test("Dockerfile: multi-stage, pinned bases, distroless nonroot, binary entrypoint", () => {
  const lines = read("Dockerfile").split("\n").map((l) => l.trim()).filter((l) =>
    l && !l.startsWith("#")
  );
  const froms = lines.filter((l) => l.startsWith("FROM "));
  assertEquals(froms.length, 2, froms.join("\n"));
  assertEquals(froms[0], `FROM denoland/deno:debian-${denoVersion} AS build`);
  assertEquals(froms[1], "FROM gcr.io/distroless/cc-debian12:nonroot");
  const final = lines.slice(lines.indexOf(froms[1]));
  assert(final.includes("USER 65532:65532"), "final stage must run as 65532");
  assert(!final.some((l) => l.startsWith("RUN ")), "no RUN in the final stage (no shell there)");
  assertEquals(final.filter((l) => l.startsWith("ENTRYPOINT")), [
    'ENTRYPOINT ["/appservice-operator"]',
  ]);
  assert(
    lines.some((l) => /^RUN deno task compile\b/.test(l)),
    "the image compiles with deno task compile",
  );
  const ignore = read(".dockerignore");
  assert(ignore.startsWith("#") && ignore.includes("\n*\n"), ".dockerignore excludes by default");
});

Deno.test("compile task: same permission flags as deno task start, no -A", async () => {
  const deno = JSON.parse(read("deno.json"));
  const { startFlags } = await import("../../scripts/compile.ts");
  const flags = await startFlags();
  assert(flags.length >= 4, flags.join(" "));
  assert(!String(deno.tasks.start).includes(" -A"), "start must not use -A");
  assert(!flags.some((f) => f === "--allow-all"));
  assert(flags.includes("--allow-sys=hostname"));
  assert(flags.some((f) => f.startsWith("--allow-env=")), "env access is listed, not blanket");
  assert(!flags.some((f) => f.startsWith("--allow-write") || f.startsWith("--allow-ffi")));
  assert(String(deno.tasks.compile).includes("scripts/compile.ts"));
});

Deno.test("deploy/: 2 replicas with leader election, probes, limits, restricted securityContext", () => {
  const docs = parseAllDocuments(read("deploy/deployment.yaml")).map((d) => d.toJS());
  // deno-lint-ignore no-explicit-any
  const dep = docs.find((d: any) => d.kind === "Deployment") as any;
  assertEquals(dep.spec.replicas, 2);
  const pod = dep.spec.template.spec;
  const ctr = pod.containers[0];
  assert(ctr.args.includes("--leader-elect"));
  assertEquals(ctr.livenessProbe.httpGet.path, "/healthz");
  assertEquals(ctr.readinessProbe.httpGet.path, "/readyz");
  assert(ctr.resources.requests.memory && ctr.resources.limits.memory);
  assertEquals(pod.securityContext.runAsNonRoot, true);
  assertEquals(pod.securityContext.seccompProfile.type, "RuntimeDefault");
  assertEquals(ctr.securityContext.readOnlyRootFilesystem, true);
  assertEquals(ctr.securityContext.allowPrivilegeEscalation, false);
  assertEquals(ctr.securityContext.capabilities.drop, ["ALL"]);
  const kust = read("deploy/kustomization.yaml");
  for (
    const f of [
      "namespace.yaml",
      "../crd",
      "serviceaccount.yaml",
      "rbac.yaml",
      "deployment.yaml",
      "service.yaml",
    ]
  ) {
    assert(kust.includes(`- ${f}`), f);
  }
});

Deno.test("README documents every flag with its env var", () => {
  const readme = read("README.md");
  for (const f of FLAGS) {
    assert(readme.includes(`--${f.name}`), `README lacks --${f.name}`);
    assert(readme.includes(f.env), `README lacks ${f.env}`);
  }
});
