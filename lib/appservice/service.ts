/**
 * The Service of an AppService: a ClusterIP Service named like the AppService, selecting its Pods,
 * with one port per container port (named ports keep their name; the Service port equals the
 * container port). Present while `spec.ports` is non-empty; deleted when it empties.
 *
 * @module
 */
import type { Service, ServicePort } from "kubernetes-types/core/v1.d.ts";
import { createHash } from "node:crypto";
import { ownedLabels, ownerRef, selectorLabels, stableJson } from "./pods.ts";

/** Annotation on the Service: hash of the ports, selector and type this operator last applied. */
export const SERVICE_HASH_ANNOTATION = "apps.our-org.com/service-hash";
import type { AppService } from "./schema.ts";

/** The desired Service, or undefined when the AppService declares no ports. */
export function desiredService(as: AppService): Service | undefined {
  const ports = as.spec.ports ?? [];
  if (ports.length === 0) return undefined;
  const svcPorts: ServicePort[] = ports.map((p, i) => ({
    name: p.name ?? (ports.length > 1 ? `port-${i}-${p.containerPort}` : undefined),
    port: p.containerPort,
    targetPort: p.containerPort,
    protocol: p.protocol ?? "TCP",
  }));
  const spec = { type: "ClusterIP", selector: selectorLabels(as), ports: svcPorts };
  const hash = createHash("sha256").update(stableJson(spec)).digest("hex").slice(0, 10);
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: {
      name: as.metadata.name,
      namespace: as.metadata.namespace,
      labels: ownedLabels(as),
      annotations: { [SERVICE_HASH_ANNOTATION]: hash },
      ownerReferences: [ownerRef(as)],
    },
    spec,
  };
}

/**
 * Whether the live Service already has what this operator applies: the same applied hash
 * (annotation), its selector, type and every desired port. Server-defaulted fields (clusterIP,
 * sessionAffinity...) and ports or labels that another field manager added are ignored: server-side
 * apply would not remove them anyway, so comparing them would re-apply on every reconcile.
 */
export function serviceMatches(live: Service, want: Service): boolean {
  const key = (p: ServicePort) =>
    `${p.name ?? ""}|${p.port}|${p.targetPort ?? p.port}|${p.protocol ?? "TCP"}`;
  const livePorts = new Set((live.spec?.ports ?? []).map(key));
  const labelsOk = Object.entries(want.metadata?.labels ?? {}).every(([k, v]) =>
    live.metadata?.labels?.[k] === v
  );
  return labelsOk &&
    live.metadata?.annotations?.[SERVICE_HASH_ANNOTATION] ===
      want.metadata?.annotations?.[SERVICE_HASH_ANNOTATION] &&
    (live.spec?.type ?? "ClusterIP") === want.spec?.type &&
    stableJson(live.spec?.selector ?? {}) === stableJson(want.spec?.selector ?? {}) &&
    (want.spec?.ports ?? []).every((p) => livePorts.has(key(p)));
}
