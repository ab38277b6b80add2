/**
 * deploy/'s Deployment as podman flags (tests/e2e/podman.ts), without a container engine: the
 * security context, resources and ServiceAccount mount become the flags a kubelet's runtime would
 * apply; only bind-address ports are rewritten; settings that cannot be reproduced are refused.
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import {
  memoryBytes,
  milliCpu,
  podmanRunArgs,
  probePort,
  readDeployment,
  rewriteBindPorts,
  SERVICE_ACCOUNT_MOUNT,
} from "../e2e/podman.ts";

const REPO = new URL("../../", import.meta.url).pathname;
const deploy = () => readDeployment(Deno.readTextFileSync(`${REPO}deploy/deployment.yaml`));

Deno.test("rewriteBindPorts: only the ports of --*-bind-address change", () => {
  let next = 40000;
  const r = rewriteBindPorts(
    [
      "--leader-elect",
      "--metrics-bind-address=:8443",
      "--health-probe-bind-address",
      "0.0.0.0:8081",
      "--pprof-bind-address=0",
      "--max-concurrent-reconciles=4",
    ],
    () => next++,
  );
  assertEquals(r.args, [
    "--leader-elect",
    "--metrics-bind-address=:40000",
    "--health-probe-bind-address",
    "0.0.0.0:40001",
    "--pprof-bind-address=0",
    "--max-concurrent-reconciles=4",
  ]);
  assertEquals([...r.ports], [[8443, 40000], [8081, 40001]]);
});

Deno.test("quantities: memory in bytes, cpu in millicores", () => {
  assertEquals(memoryBytes("384Mi"), 384 * 2 ** 20);
  assertEquals(memoryBytes("1G"), 1e9);
  assertEquals(memoryBytes(1000), 1000);
  assertEquals(milliCpu("50m"), 50);
  assertEquals(milliCpu("1.5"), 1500);
  assertEquals(milliCpu(2), 2000);
});

Deno.test("podmanRunArgs: deploy/'s securityContext, resources, ServiceAccount and args", () => {
  const { pod, container } = deploy();
  let port = 50000;
  const { args, ports } = rewriteBindPorts(container.args ?? [], () => port++);
  const flags = podmanRunArgs(pod, container, {
    name: "x",
    image: "img",
    serviceAccountDir: "/tmp/sa",
    apiserverPort: 6443,
    args,
  });
  for (
    const f of [
      "--network=host",
      "--user=65532:65532",
      "--read-only",
      "--read-only-tmpfs=false",
      "--cap-drop=ALL",
      "--security-opt=no-new-privileges",
      `--memory=${384 * 2 ** 20}`,
      "--cpu-shares=51",
      "--env=KUBERNETES_SERVICE_HOST=127.0.0.1",
      "--env=KUBERNETES_SERVICE_PORT=6443",
      `--volume=/tmp/sa:${SERVICE_ACCOUNT_MOUNT}:ro`,
      `--stop-timeout=${pod.terminationGracePeriodSeconds}`,
    ]
  ) {
    assert(flags.includes(f), `missing ${f} in ${flags.join(" ")}`);
  }
  // The image, then the Deployment's args (ports rewritten), last.
  assertEquals(flags.slice(flags.indexOf("img") + 1), args);
  assert(args.includes("--leader-elect"));
  const probe = container.readinessProbe!.httpGet!.port;
  assertEquals(probePort(container, probe, ports), ports.get(8081));
});

Deno.test("podmanRunArgs refuses what it cannot reproduce", async () => {
  const { pod, container } = deploy();
  const setup = { name: "x", image: "i", serviceAccountDir: "/s", apiserverPort: 1, args: [] };
  await assertRejects(() =>
    podmanRunArgs(pod, { ...container, env: [{ name: "A", valueFrom: {} }] }, setup)
  );
  await assertRejects(() =>
    podmanRunArgs(
      {
        ...pod,
        securityContext: { ...pod.securityContext, seccompProfile: { type: "Unconfined" } },
      },
      container,
      setup,
    )
  );
  await assertRejects(() =>
    podmanRunArgs(
      pod,
      { ...container, securityContext: { ...container.securityContext, runAsUser: 0 } },
      setup,
    )
  );
});
