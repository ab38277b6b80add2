/**
 * Running deploy/'s Deployment with podman on this machine: the container's args, env, security
 * context and resources become `podman run` flags, the way kubelet and a CRI runtime would apply
 * them, so the manifests and the container test cannot drift apart. Pure functions; the test
 * (tests/e2e/container_test.ts) runs them.
 *
 * What differs from a kubelet, and why:
 * - host networking (`--network host`, the apiserver is `KUBERNETES_SERVICE_HOST=127.0.0.1`), so
 *   each `--*-bind-address` port is rewritten to a free port (nothing else in the args changes);
 * - explicit `--ulimit`s (this sandbox lacks CAP_SYS_RESOURCE, see scripts/image.ts);
 * - `seccompProfile: RuntimeDefault` is podman's default seccomp profile (no flag).
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import type { Container, PodSpec } from "kubernetes-types/core/v1.d.ts";
import type { Deployment } from "kubernetes-types/apps/v1.d.ts";
import { PODMAN_ULIMITS } from "../../scripts/image.ts";

/** Where kubelet mounts the ServiceAccount's token, CA and namespace (Kubernetes docs). */
export const SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount";

/** The Deployment in deploy/deployment.yaml and its first (only) container. */
export function readDeployment(yamlText: string): {
  deployment: Deployment;
  pod: PodSpec;
  container: Container;
} {
  const deployment = parseAllDocuments(yamlText).map((d) => d.toJS()).find((o) =>
    o?.kind === "Deployment"
  ) as Deployment | undefined;
  if (!deployment?.spec?.template.spec) throw new Error("no Deployment in deploy/deployment.yaml");
  const pod = deployment.spec.template.spec;
  if (pod.containers.length !== 1) throw new Error("expected one container");
  return { deployment, pod, container: pod.containers[0] };
}

/**
 * The container's args with every `--*-bind-address` port (`--x-bind-address=HOST:PORT` or
 * `--x-bind-address HOST:PORT`) replaced by `freePort()`; the host part, every other arg and the
 * order stay. `0` (disabled) is left alone.
 * @returns the args and the port map (Deployment port -> port used here)
 */
export function rewriteBindPorts(
  args: readonly string[],
  freePort: () => number,
): { args: string[]; ports: Map<number, number> } {
  const ports = new Map<number, number>();
  const out: string[] = [];
  const rewrite = (value: string) =>
    value.replace(/:(\d+)$/, (_, p) => {
      const to = freePort();
      ports.set(Number(p), to);
      return `:${to}`;
    });
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const eq = /^(--[a-z0-9-]*bind-address)=(.*)$/.exec(a);
    if (eq) {
      out.push(`${eq[1]}=${rewrite(eq[2])}`);
    } else if (/^--[a-z0-9-]*bind-address$/.test(a) && i + 1 < args.length) {
      out.push(a, rewrite(args[++i]));
    } else {
      out.push(a);
    }
  }
  return { args: out, ports };
}

/** A Kubernetes memory quantity (`384Mi`, `1G`, `1000`) in bytes. @throws Error otherwise */
export function memoryBytes(q: string | number): number {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(q));
  if (!m) throw new Error(`memory quantity ${q} not understood`);
  const mult: Record<string, number> = {
    "": 1,
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
  };
  return Math.round(Number(m[1]) * mult[m[2] ?? ""]);
}

/** A Kubernetes CPU quantity (`50m`, `0.5`, `2`) in millicores. @throws Error otherwise */
export function milliCpu(q: string | number): number {
  const m = /^(\d+(?:\.\d+)?)(m)?$/.exec(String(q));
  if (!m) throw new Error(`cpu quantity ${q} not understood`);
  return m[2] ? Number(m[1]) : Math.round(Number(m[1]) * 1000);
}

/** Inputs of {@linkcode podmanRunArgs} that do not come from the Deployment. */
export interface RunSetup {
  /** Container name. */
  name: string;
  /** Image reference. */
  image: string;
  /** Host folder holding `token`, `ca.crt` and `namespace`. */
  serviceAccountDir: string;
  /** The apiserver's port on 127.0.0.1. */
  apiserverPort: number;
  /** Args after {@linkcode rewriteBindPorts}. */
  args: string[];
}

/**
 * `podman run` flags (after `run`) that run `container` of `pod` as kubelet would, detached.
 * Mappings: runAsUser/runAsGroup -> `--user` (runAsNonRoot: the uid must not be 0);
 * readOnlyRootFilesystem -> `--read-only --read-only-tmpfs=false` (no tmpfs that Kubernetes would
 * not add); capabilities -> `--cap-drop`/`--cap-add`; allowPrivilegeEscalation: false ->
 * `--security-opt=no-new-privileges`; limits.memory -> `--memory`; requests.cpu -> `--cpu-shares`
 * (kubelet's milli * 1024 / 1000); limits.cpu -> `--cpus`; env values -> `--env` (a fieldRef to
 * `metadata.name`: the container's name); command ->
 * `--entrypoint`; the ServiceAccount folder mounted read-only; `KUBERNETES_SERVICE_HOST/PORT`.
 * @throws Error for a setting this cannot reproduce (e.g. env valueFrom, a seccomp profile other
 *   than RuntimeDefault), so a new manifest setting fails the test instead of being skipped
 */
export function podmanRunArgs(pod: PodSpec, container: Container, setup: RunSetup): string[] {
  const psc = pod.securityContext ?? {};
  const csc = container.securityContext ?? {};
  const uid = csc.runAsUser ?? psc.runAsUser;
  const gid = csc.runAsGroup ?? psc.runAsGroup ?? uid;
  if (uid === undefined) throw new Error("the Deployment sets no runAsUser");
  if ((csc.runAsNonRoot ?? psc.runAsNonRoot) && uid === 0) {
    throw new Error("runAsNonRoot with runAsUser 0: kubelet would refuse to start it");
  }
  const seccomp = csc.seccompProfile?.type ?? psc.seccompProfile?.type ?? "RuntimeDefault";
  if (seccomp !== "RuntimeDefault") throw new Error(`seccompProfile ${seccomp} not reproduced`);
  if (pod.automountServiceAccountToken === false) {
    throw new Error("automountServiceAccountToken: false is not reproduced");
  }
  const flags = [
    "run",
    "--detach",
    "--pull=never",
    `--name=${setup.name}`,
    "--network=host",
    `--user=${uid}:${gid}`,
    ...PODMAN_ULIMITS,
  ];
  if (csc.readOnlyRootFilesystem) flags.push("--read-only", "--read-only-tmpfs=false");
  if (csc.allowPrivilegeEscalation === false) flags.push("--security-opt=no-new-privileges");
  if (csc.privileged) throw new Error("privileged containers are not reproduced");
  for (const c of csc.capabilities?.drop ?? []) flags.push(`--cap-drop=${c}`);
  for (const c of csc.capabilities?.add ?? []) flags.push(`--cap-add=${c}`);
  const res = container.resources ?? {};
  if (res.limits?.memory !== undefined) {
    flags.push(`--memory=${memoryBytes(res.limits.memory as string)}`);
  }
  if (res.requests?.cpu !== undefined) {
    flags.push(
      `--cpu-shares=${Math.max(2, Math.floor(milliCpu(res.requests.cpu as string) * 1024 / 1000))}`,
    );
  }
  if (res.limits?.cpu !== undefined) {
    flags.push(`--cpus=${milliCpu(res.limits.cpu as string) / 1000}`);
  }
  for (const e of container.env ?? []) {
    // The downward API's Pod name: the container's name here (what the test's Pod would be).
    if (e.valueFrom?.fieldRef?.fieldPath === "metadata.name") {
      flags.push(`--env=${e.name}=${setup.name}`);
      continue;
    }
    if (e.valueFrom) throw new Error(`env ${e.name}: valueFrom is not reproduced`);
    flags.push(`--env=${e.name}=${e.value ?? ""}`);
  }
  if (container.envFrom?.length) throw new Error("envFrom is not reproduced");
  if (container.volumeMounts?.length) throw new Error("volumeMounts are not reproduced");
  flags.push(
    "--env=KUBERNETES_SERVICE_HOST=127.0.0.1",
    `--env=KUBERNETES_SERVICE_PORT=${setup.apiserverPort}`,
    `--volume=${setup.serviceAccountDir}:${SERVICE_ACCOUNT_MOUNT}:ro`,
  );
  if (pod.terminationGracePeriodSeconds !== undefined) {
    flags.push(`--stop-timeout=${pod.terminationGracePeriodSeconds}`);
  }
  if (container.command?.length) flags.push(`--entrypoint=${JSON.stringify(container.command)}`);
  flags.push(setup.image, ...setup.args);
  return flags;
}

/**
 * The host port an httpGet probe reaches: its `port` (a number or a container port's name) mapped
 * through the bind-address rewrite.
 * @throws Error when the port is not declared or not rewritten
 */
export function probePort(
  container: Container,
  port: number | string,
  rewritten: Map<number, number>,
): number {
  const declared = typeof port === "number"
    ? port
    : container.ports?.find((p) => p.name === port)?.containerPort;
  if (declared === undefined) throw new Error(`probe port ${port} is not a container port`);
  const to = rewritten.get(declared);
  if (to === undefined) throw new Error(`no --*-bind-address serves port ${declared}`);
  return to;
}
