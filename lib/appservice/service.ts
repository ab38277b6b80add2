/**
 * The Service of an AppService: a ClusterIP Service named like the AppService, selecting its Pods,
 * with one port per container port (named ports keep their name; the Service port equals the
 * container port). Present while `spec.ports` is non-empty; deleted when it empties.
 *
 * Ownership (docs/scenarios.md S20): the AppService is the only source of truth for the Service it
 * controls. The
 * Service is created with server-side apply; when it differs from the AppService — because the
 * spec changed, or because another writer (server-side or client-side apply, a PUT, a patch) holds
 * fields there — one JSON merge patch ({@link servicePatch}) sets the port list, the selector and
 * the type outright, whatever field managers own, so the result never depends on another manager's
 * entries (a server-side apply would keep them and merge them with ours). Other writers' labels,
 * annotations and fields the operator does not set are kept.
 *
 * @module
 */
import type { Service, ServicePort } from "kubernetes-types/core/v1.d.ts";
import { createHash } from "node:crypto";
import { ownedLabels, ownerRef, selectorLabels, stableJson } from "./pods.ts";
import type { AppService } from "./schema.ts";

/** Annotation on the Service: hash of the ports, selector and type this operator last applied. */
export const SERVICE_HASH_ANNOTATION = "apps.our-org.com/service-hash";

/**
 * Service port names: a declared name is kept; an unnamed port of several is named
 * `port-<index>-<containerPort>`, with `-<n>` appended when a declared name already has that form
 * (the Service API requires unique names when there are several ports, validateServicePort).
 */
function servicePortNames(ports: AppService["spec"]["ports"] & object): (string | undefined)[] {
  const taken = new Set(ports.flatMap((p) => (p.name ? [p.name] : [])));
  return ports.map((p, i) => {
    if (p.name) return p.name;
    if (ports.length === 1) return undefined;
    let name = `port-${i}-${p.containerPort}`;
    for (let n = 1; taken.has(name) && n <= ports.length; n++) {
      name = `port-${i}-${p.containerPort}-${n}`;
    }
    taken.add(name);
    return name;
  });
}

/** The desired Service, or undefined when the AppService declares no ports. */
export function desiredService(as: AppService): Service | undefined {
  const ports = as.spec.ports ?? [];
  if (ports.length === 0) return undefined;
  const names = servicePortNames(ports);
  const svcPorts: ServicePort[] = ports.map((p, i) => ({
    name: names[i],
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

/** A Service port in comparable form: every field a port can carry that changes its meaning. */
function portKey(p: ServicePort): string {
  return stableJson({
    name: p.name ?? "",
    port: p.port,
    targetPort: p.targetPort ?? p.port,
    protocol: p.protocol ?? "TCP",
    appProtocol: p.appProtocol,
    nodePort: p.nodePort,
  });
}

/**
 * Whether the live Service already is what the AppService says. The AppService is the only
 * source of truth for what it controls — the port list (exactly: a port another writer added, or
 * an extra `appProtocol`/`nodePort`, is a difference), the selector (exactly) and the type — and
 * for the labels it relies on (`managed-by`, `instance`: their values). What else is on the
 * Service is left as others
 * set it: their labels and annotations, and server-defaulted or user-set fields such as
 * `clusterIP`, `sessionAffinity` or `internalTrafficPolicy`. Port order does not matter.
 */
export function serviceMatches(live: Service, want: Service): boolean {
  const livePorts = (live.spec?.ports ?? []).map(portKey).sort();
  const wantPorts = (want.spec?.ports ?? []).map(portKey).sort();
  const mapOk = (have?: Record<string, string>, ours?: Record<string, string>) =>
    Object.entries(ours ?? {}).every(([k, v]) => have?.[k] === v);
  // Of its own metadata, only the labels the operator relies on (managed-by puts the Service in
  // its cache, instance makes an orphan adoptable; the selector's keys): the `name` label and the
  // hash annotation are informational, and a policy rewriting them must not make every reconcile
  // write the Service again (they are set whenever the Service is written for another reason).
  return mapOk(live.metadata?.labels, want.spec?.selector) &&
    (live.spec?.type ?? "ClusterIP") === want.spec?.type &&
    stableJson(live.spec?.selector ?? {}) === stableJson(want.spec?.selector ?? {}) &&
    stableJson(livePorts) === stableJson(wantPorts);
}

/**
 * Spec fields that only some Service types allow (validateServiceExternalTrafficPolicy and the
 * type checks of ValidateService): cleared when another writer changed the type and the operator
 * sets it back to ClusterIP, or the change would be refused.
 */
const TYPE_SPECIFIC_FIELDS = [
  "externalName",
  "externalTrafficPolicy",
  "healthCheckNodePort",
  "loadBalancerIP",
  "loadBalancerSourceRanges",
  "loadBalancerClass",
  "allocateLoadBalancerNodePorts",
] as const;

/**
 * The JSON merge patch (RFC 7386) that makes `live` what `want` says, whoever owns which field:
 * it replaces the port list as a whole (a merge patch replaces lists; server-side apply would keep
 * entries another field manager owns and merge them with ours into an invalid list,
 * docs/scenarios.md S20), sets the
 * selector exactly (keys others added are removed) and the type, and sets the operator's labels
 * and annotation, leaving other labels and annotations alone.
 */
export function servicePatch(live: Service, want: Service): Record<string, unknown> {
  const selector: Record<string, string | null> = { ...want.spec?.selector };
  for (const k of Object.keys(live.spec?.selector ?? {})) if (!(k in selector)) selector[k] = null;
  const spec: Record<string, unknown> = {
    type: want.spec?.type,
    selector,
    ports: want.spec?.ports,
  };
  if ((live.spec?.type ?? "ClusterIP") !== want.spec?.type) {
    for (const f of TYPE_SPECIFIC_FIELDS) spec[f] = null;
  }
  return {
    metadata: { labels: want.metadata?.labels, annotations: want.metadata?.annotations },
    spec,
  };
}
