/**
 * The Service of an AppService: a ClusterIP Service named like the AppService, selecting its Pods,
 * with one port per container port (named ports keep their name; the Service port equals the
 * container port). Present while `spec.ports` is non-empty; deleted when it empties.
 *
 * @module
 */
import type { Service, ServicePort } from "kubernetes-types/core/v1.d.ts";
import { ownedLabels, ownerRef, selectorLabels, stableJson } from "./pods.ts";
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
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: {
      name: as.metadata.name,
      namespace: as.metadata.namespace,
      labels: ownedLabels(as),
      ownerReferences: [ownerRef(as)],
    },
    spec: { type: "ClusterIP", selector: selectorLabels(as), ports: svcPorts },
  };
}

/**
 * Whether the live Service already matches the desired one in the fields this operator owns
 * (ports, selector, type, labels). Server-defaulted fields (clusterIP, sessionAffinity...) are
 * ignored, so an unchanged AppService causes no Service write.
 */
export function serviceMatches(live: Service, want: Service): boolean {
  const norm = (ps?: ServicePort[]) =>
    (ps ?? []).map((p) => ({
      name: p.name ?? "",
      port: p.port,
      targetPort: p.targetPort ?? p.port,
      protocol: p.protocol ?? "TCP",
    }));
  const labelsOk = Object.entries(want.metadata?.labels ?? {}).every(([k, v]) =>
    live.metadata?.labels?.[k] === v
  );
  return labelsOk &&
    (live.spec?.type ?? "ClusterIP") === want.spec?.type &&
    stableJson(live.spec?.selector ?? {}) === stableJson(want.spec?.selector ?? {}) &&
    stableJson(norm(live.spec?.ports)) === stableJson(norm(want.spec?.ports));
}
