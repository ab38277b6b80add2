/**
 * Delivery invariants that need no container engine or cluster: the Dockerfile's stages, base
 * images, user and entrypoint; the compile task's flags equal `deno task start`'s; the deploy
 * manifests' security settings; docs/operations.md documents every flag.
 */
import { parseAllDocuments } from "yaml";
import { assert, assertEquals } from "../assert.ts";
import { FLAGS } from "../../lib/cli.ts";

const REPO = new URL("../../", import.meta.url).pathname;
const read = (p: string) => Deno.readTextFileSync(`${REPO}${p}`);
const denoVersion = /DENO_VERSION=([0-9.]+)/.exec(read("scripts/ensure-deno.sh"))![1];

/** A Dockerfile's stages: the FROM line's image and name, and the instructions after it. */
function stages(text: string): { from: string; name?: string; lines: string[] }[] {
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  const out: { from: string; name?: string; lines: string[] }[] = [];
  for (const l of lines) {
    const m = /^FROM (\S+)(?: AS (\S+))?$/.exec(l);
    if (m) out.push({ from: m[1], name: m[2], lines: [] });
    else out.at(-1)?.lines.push(l);
  }
  return out;
}

const dockerfile = () => read("Dockerfile");

Deno.test("Dockerfile: base images are build arguments with pinned defaults", () => {
  const args = dockerfile().split("\n").filter((l) => l.startsWith("ARG "));
  assertEquals(args, [
    `ARG DENO_IMAGE=denoland/deno:debian-${denoVersion}`,
    "ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot",
  ]);
  const st = stages(dockerfile());
  assertEquals(st.map((s) => [s.from, s.name]), [
    ["${DENO_IMAGE}", "build"],
    ["${DENO_IMAGE}", "deps"],
    ["${RUNTIME_IMAGE}", "deno-run"],
    ["${RUNTIME_IMAGE}", undefined],
  ]);
  const ignore = read(".dockerignore");
  assert(ignore.startsWith("#") && ignore.includes("\n*\n"), ".dockerignore excludes by default");
  assert(ignore.includes("\n!scripts/image_app.ts\n"), "the deps stage's script is in the context");
});

/** The container ports of deploy/deployment.yaml (metrics, then probes). */
function deploymentPorts(): number[] {
  // deno-lint-ignore no-explicit-any
  const d = parseAllDocuments(read("deploy/deployment.yaml")).map((x) => x.toJSON() as any)
    .find((x) => x?.kind === "Deployment");
  // deno-lint-ignore no-explicit-any
  return d.spec.template.spec.containers[0].ports.map((p: any) => p.containerPort);
}

Deno.test("Dockerfile: both final stages are nonroot, shell-free, read-only, same ports", () => {
  const st = stages(dockerfile());
  // EXPOSE documents the ports deploy/ serves on (HTTPS /metrics :8443 and probes :8081).
  const expose = `EXPOSE ${deploymentPorts().join(" ")}`;
  assertEquals(expose, "EXPOSE 8443 8081");
  for (const s of st.filter((s) => s.from === "${RUNTIME_IMAGE}")) {
    const what = s.name ?? "default target";
    assert(s.lines.includes("USER 65532:65532"), `${what} must run as 65532`);
    assert(!s.lines.some((l) => l.startsWith("RUN ")), `${what}: no RUN (no shell there)`);
    // Root-owned files: user 65532 cannot change the program or its dependency cache.
    assert(!s.lines.some((l) => l.includes("--chown") || l.includes("--chmod")), what);
    assertEquals(s.lines.filter((l) => l.startsWith("EXPOSE")), [expose], what);
    assertEquals(s.lines.filter((l) => l.startsWith("ENTRYPOINT")).length, 1, what);
    assert(!s.lines.some((l) => l.startsWith("CMD")), `${what}: args come from the Deployment`);
  }
});

Deno.test("Dockerfile default target: deno task compile, the binary as entrypoint", () => {
  const st = stages(dockerfile());
  const build = st.find((s) => s.name === "build")!;
  assert(
    build.lines.some((l) => /^RUN deno task compile\b/.test(l)),
    "the image compiles with deno task compile",
  );
  const last = st.at(-1)!;
  assertEquals(last.name, undefined, "the last stage (docker build's default) is the binary");
  assert(last.lines.includes("COPY --from=build /out/appservice-operator /appservice-operator"));
  assertEquals(last.lines.filter((l) => l.startsWith("ENTRYPOINT")), [
    'ENTRYPOINT ["/appservice-operator"]',
  ]);
});

Deno.test("Dockerfile deno-run target: deno run with exactly deno task start's permissions", async () => {
  const { startFlags } = await import("../../scripts/compile.ts");
  const st = stages(dockerfile());
  const deps = st.find((s) => s.name === "deps")!;
  // Exec form only: the local DENO_IMAGE (scripts/image) has no shell.
  const runs = deps.lines.filter((l) => l.startsWith("RUN "));
  assert(runs.length > 0 && runs.every((l) => l.startsWith("RUN [")), runs.join("\n"));
  const final = st.find((s) => s.name === "deno-run")!;
  const entry = JSON.parse(
    final.lines.find((l) => l.startsWith("ENTRYPOINT "))!.slice("ENTRYPOINT ".length),
  );
  assertEquals(entry, [
    "/usr/bin/deno",
    "run",
    "--cached-only",
    "--frozen",
    ...await startFlags(),
    "/app/main.ts",
  ]);
  assert(final.lines.includes("COPY --from=deps /usr/bin/deno /usr/bin/deno"));
  assert(final.lines.some((l) => /^ENV DENO_DIR=\/deno-dir\b/.test(l)), "DENO_DIR=/deno-dir");
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
      "metrics_reader_role.yaml",
      "deployment.yaml",
      "service.yaml",
      "network_policy.yaml",
    ]
  ) {
    assert(kust.includes(`- ${f}`), f);
  }
});

Deno.test("deploy/: secure /metrics on 8443 end to end (args, port, Service, NetworkPolicy, RBAC)", () => {
  // deno-lint-ignore no-explicit-any
  const docs = (f: string): any[] => parseAllDocuments(read(`deploy/${f}`)).map((d) => d.toJS());
  const dep = docs("deployment.yaml").find((d) => d.kind === "Deployment");
  const pod = dep.spec.template.spec;
  const ctr = pod.containers[0];
  assert(ctr.args.includes("--metrics-secure=true"), ctr.args.join(" "));
  assert(ctr.args.includes("--metrics-bind-address=:8443"), ctr.args.join(" "));
  const metricsPort = ctr.ports.find((p: { name: string }) => p.name === "metrics");
  assertEquals(metricsPort.containerPort, 8443);
  // Probes on their own plain port.
  assertEquals(ctr.readinessProbe.httpGet.port, "probes");
  assert(!ctr.readinessProbe.httpGet.scheme || ctr.readinessProbe.httpGet.scheme === "HTTP");

  const svc = docs("service.yaml")[0];
  assertEquals(svc.spec.ports, [{
    name: "https",
    port: 8443,
    protocol: "TCP",
    targetPort: "metrics",
  }]);
  assertEquals(svc.spec.selector, dep.spec.selector.matchLabels);

  const np = docs("network_policy.yaml")[0];
  assertEquals(np.kind, "NetworkPolicy");
  assertEquals(np.metadata.namespace, dep.metadata.namespace);
  assertEquals(np.spec.podSelector.matchLabels, dep.spec.template.metadata.labels);
  assertEquals(np.spec.policyTypes, ["Ingress"]);
  assertEquals(np.spec.ingress, [{
    from: [{ namespaceSelector: { matchLabels: { metrics: "enabled" } } }],
    ports: [{ port: 8443, protocol: "TCP" }],
  }]);
  assert(
    read("docs/security.md").includes("`metrics: enabled`"),
    "docs/security.md names the NetworkPolicy label",
  );

  const reader = docs("metrics_reader_role.yaml")[0];
  assertEquals(reader.kind, "ClusterRole");
  assertEquals(reader.rules, [{ nonResourceURLs: ["/metrics"], verbs: ["get"] }]);

  // The operator may create the two reviews, and nothing more about them.
  const role = docs("rbac.yaml").find((d) => d.kind === "ClusterRole");
  const reviews = role.rules.filter((r: { apiGroups: string[] }) =>
    r.apiGroups.some((g) => g.startsWith("authentication") || g.startsWith("authorization"))
  );
  assertEquals(reviews, [
    { apiGroups: ["authentication.k8s.io"], resources: ["tokenreviews"], verbs: ["create"] },
    {
      apiGroups: ["authorization.k8s.io"],
      resources: ["subjectaccessreviews"],
      verbs: ["create"],
    },
  ]);
});

Deno.test("docs/operations.md documents every flag with its env var", () => {
  const doc = read("docs/operations.md");
  for (const f of FLAGS) {
    assert(doc.includes(`--${f.name}`), `docs/operations.md lacks --${f.name}`);
    assert(doc.includes(f.env), `docs/operations.md lacks ${f.env}`);
  }
});
