/**
 * The AppService API, written once: TypeBox schemas give the TypeScript types, the CRD in
 * `crd/appservice.yaml` (see {@link appServiceCrd}; `deno task crd` writes it, a test fails when
 * the committed file is stale) and in-process validation ({@link validateSpec}).
 *
 * Shapes follow the Kubernetes API (core/v1 EnvVar, ContainerPort, ResourceRequirements,
 * meta/v1 Condition) and the structural-schema rules of apiextensions.k8s.io/v1 (every field
 * typed; quantities are `x-kubernetes-int-or-string`).
 *
 * @module
 */
import { type Static, type TSchema, Type } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";

import { GROUP, KIND, PLURAL, VERSION } from "./api.ts";
export { APPSERVICES, FINALIZER, GROUP, KIND, PLURAL, VERSION } from "./api.ts";

/**
 * Container image reference: `[registry[:port]/]path[:tag][@sha256:<64 hex>]` with a tag, a digest
 * or both (distribution/reference grammar). Path components are lower case; the registry host may
 * carry a port. RE2-compatible, as the apiserver evaluates `pattern` with Go's regexp.
 */
export const IMAGE_PATTERN = "^" +
  "(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])" +
  "(?:\\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?" +
  "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*" +
  "(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*" +
  "(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(?:@sha256:[a-f0-9]{64})?|@sha256:[a-f0-9]{64})$";

/** A resource quantity ("500m", "128Mi", 2): int-or-string with the Kubernetes quantity form. */
const Quantity = Type.Unsafe<string | number>({
  "x-kubernetes-int-or-string": true,
  anyOf: [{ type: "integer" }, { type: "string" }],
  pattern:
    "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
});

const KeySelector = (what: string) =>
  Type.Object({
    name: Type.Optional(Type.String({ description: `Name of the ${what}.` })),
    key: Type.String({ description: `Key in the ${what}.` }),
    optional: Type.Optional(Type.Boolean()),
  });

/** core/v1 EnvVar. */
export const EnvVar = Type.Object({
  name: Type.String({ minLength: 1, description: "Environment variable name." }),
  value: Type.Optional(Type.String()),
  valueFrom: Type.Optional(Type.Object({
    configMapKeyRef: Type.Optional(KeySelector("ConfigMap")),
    secretKeyRef: Type.Optional(KeySelector("Secret")),
    fieldRef: Type.Optional(Type.Object({
      apiVersion: Type.Optional(Type.String()),
      fieldPath: Type.String(),
    })),
    resourceFieldRef: Type.Optional(Type.Object({
      containerName: Type.Optional(Type.String()),
      resource: Type.String(),
      divisor: Type.Optional(Quantity),
    })),
  })),
});

/** core/v1 ContainerPort. */
export const ContainerPort = Type.Object({
  containerPort: Type.Integer({ minimum: 1, maximum: 65535, description: "Port number." }),
  name: Type.Optional(Type.String({
    maxLength: 15,
    pattern: "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$",
    description: "IANA_SVC_NAME; also the Service port name.",
  })),
  protocol: Type.Optional(Type.Union([
    Type.Literal("TCP"),
    Type.Literal("UDP"),
    Type.Literal("SCTP"),
  ], { default: "TCP" })),
  hostIP: Type.Optional(Type.String()),
  hostPort: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
});

/** core/v1 ResourceRequirements (limits, requests). */
export const ResourceRequirements = Type.Object({
  limits: Type.Optional(Type.Record(Type.String(), Quantity)),
  requests: Type.Optional(Type.Record(Type.String(), Quantity)),
});

/** Restart policies a Pod accepts. */
export const RestartPolicy = Type.Union([
  Type.Literal("Always"),
  Type.Literal("OnFailure"),
  Type.Literal("Never"),
], { default: "Always", description: "Pod restartPolicy." });

/** AppService spec. */
export const AppServiceSpec = Type.Object({
  image: Type.String({
    minLength: 1,
    maxLength: 512,
    pattern: IMAGE_PATTERN,
    description: "Container image with a tag and/or digest, e.g. nginx:1.27 or " +
      "ghcr.io/org/app@sha256:<64 hex>.",
  }),
  replicas: Type.Optional(Type.Integer({
    minimum: 1,
    maximum: 10,
    default: 1,
    description: "Number of Pods (1 to 10).",
  })),
  resources: Type.Optional(ResourceRequirements),
  env: Type.Optional(Type.Array(EnvVar, { maxItems: 100 })),
  ports: Type.Optional(Type.Array(ContainerPort, { maxItems: 20 })),
  restartPolicy: Type.Optional(RestartPolicy),
});

/** meta/v1 Condition. */
export const Condition = Type.Object({
  type: Type.String(),
  status: Type.Union([Type.Literal("True"), Type.Literal("False"), Type.Literal("Unknown")]),
  reason: Type.String(),
  message: Type.String(),
  lastTransitionTime: Type.String({ format: "date-time" }),
  observedGeneration: Type.Optional(Type.Integer({ minimum: 0 })),
});

/** One state of a container, as core/v1 ContainerState reports it (timestamps left out but `startedAt`). */
export const ContainerStateEntry = Type.Object({
  waiting: Type.Optional(Type.Object({
    reason: Type.Optional(Type.String({ description: "e.g. ImagePullBackOff, CrashLoopBackOff." })),
    message: Type.Optional(Type.String()),
  })),
  running: Type.Optional(Type.Object({ startedAt: Type.Optional(Type.String()) })),
  terminated: Type.Optional(Type.Object({
    reason: Type.Optional(Type.String({ description: "e.g. OOMKilled, Error, Completed." })),
    exitCode: Type.Integer(),
    signal: Type.Optional(Type.Integer()),
    message: Type.Optional(Type.String()),
  })),
});

/** One container of an owned Pod, from core/v1 ContainerStatus. */
export const ContainerStatusEntry = Type.Object({
  name: Type.String(),
  ready: Type.Boolean(),
  restartCount: Type.Integer({ minimum: 0 }),
  state: Type.Optional(ContainerStateEntry),
  lastState: Type.Optional(ContainerStateEntry),
});

/** One owned Pod as reported in status. */
export const PodStatusEntry = Type.Object({
  name: Type.String(),
  phase: Type.String(),
  ready: Type.Optional(Type.Boolean()),
  restartCount: Type.Integer({ minimum: 0 }),
  podIP: Type.Optional(Type.String()),
  reason: Type.Optional(Type.String({
    description: "Why the Pod cannot become Ready (the kubelet's, the scheduler's or the " +
      "Pod's own reason, e.g. ImagePullBackOff, Unschedulable, Evicted); absent while it can.",
  })),
  message: Type.Optional(Type.String()),
  containers: Type.Optional(Type.Array(ContainerStatusEntry)),
});

/** AppService status (written only through the status subresource). */
export const AppServiceStatus = Type.Object({
  ready: Type.Optional(Type.Boolean({ description: "All desired Pods are Ready." })),
  /** Pods that exist and are not terminating (the scale subresource's status replicas). */
  replicas: Type.Optional(Type.Integer({ minimum: 0 })),
  /** Label selector of the Pods, as a string (the scale subresource's selector). */
  selector: Type.Optional(Type.String()),
  readyReplicas: Type.Optional(Type.Integer({ minimum: 0 })),
  /** "ready/desired", for the Replicas printer column. */
  replicasSummary: Type.Optional(Type.String()),
  observedGeneration: Type.Optional(Type.Integer({ minimum: 0 })),
  lastReconciliation: Type.Optional(Type.String({ format: "date-time" })),
  conditions: Type.Optional(Type.Array(Condition)),
  podStatuses: Type.Optional(Type.Array(PodStatusEntry)),
});

/** TypeScript type of the spec, after apiserver defaulting. */
export type AppServiceSpecT = Static<typeof AppServiceSpec>;
/** TypeScript type of the status. */
export type AppServiceStatusT = Static<typeof AppServiceStatus>;
/** TypeScript type of one condition. */
export type ConditionT = Static<typeof Condition>;
/** TypeScript type of a per-Pod status entry. */
export type PodStatusEntryT = Static<typeof PodStatusEntry>;
/** TypeScript type of one container's entry in a per-Pod status entry. */
export type ContainerStatusEntryT = Static<typeof ContainerStatusEntry>;
/** TypeScript type of a container state (waiting, running or terminated). */
export type ContainerStateEntryT = Static<typeof ContainerStateEntry>;

/** An AppService object as read from the apiserver. */
export interface AppService {
  apiVersion: `${typeof GROUP}/${typeof VERSION}`;
  kind: typeof KIND;
  metadata: ObjectMeta;
  spec: AppServiceSpecT;
  status?: AppServiceStatusT;
}

/**
 * Validates a spec in process (the same schema the apiserver enforces) after applying defaults.
 * Returns the defaulted spec and a list of `field: message` errors (empty when valid).
 */
export function validateSpec(spec: unknown): { spec: AppServiceSpecT; errors: string[] } {
  const withDefaults = Value.Default(
    AppServiceSpec,
    structuredClone(spec ?? {}),
  ) as AppServiceSpecT;
  const errors = [...Value.Errors(AppServiceSpec, withDefaults)].map((e) =>
    `spec${e.path.replaceAll("/", ".")}: ${e.message}`
  );
  return { spec: withDefaults, errors };
}

/**
 * Turns a TypeBox schema into a structural OpenAPI v3 schema as apiextensions.k8s.io/v1 wants it:
 * symbol keys dropped, `patternProperties` of a Record become `additionalProperties`, and a union
 * of string literals becomes `type: string` with `enum` (the apiserver has no `const`).
 */
export function toStructural(schema: TSchema): Record<string, unknown> {
  // deno-lint-ignore no-explicit-any
  const walk = (node: any): any => {
    if (Array.isArray(node)) return node.map(walk);
    if (!node || typeof node !== "object") return node;
    // deno-lint-ignore no-explicit-any
    const out: any = {};
    for (const [k, v] of Object.entries(node)) out[k] = walk(v);
    if (out.patternProperties) {
      const values = Object.values(out.patternProperties);
      delete out.patternProperties;
      if (values.length === 1) out.additionalProperties = values[0];
    }
    if (
      Array.isArray(out.anyOf) && out.anyOf.length > 0 &&
      // deno-lint-ignore no-explicit-any
      out.anyOf.every((a: any) => typeof a.const === "string")
    ) {
      // deno-lint-ignore no-explicit-any
      out.enum = out.anyOf.map((a: any) => a.const);
      out.type = "string";
      delete out.anyOf;
    }
    return out;
  };
  return walk(JSON.parse(JSON.stringify(schema)));
}

/** Message of the name validation rule. */
export const NAME_MESSAGE = "metadata.name must be at most 63 characters of lower-case letters, " +
  "digits and '-', starting with a letter (it names the Service and labels the Pods)";

/** Message of the image validation rule (what users see instead of the regular expression). */
export const IMAGE_MESSAGE =
  "must be an image reference with a tag and/or a digest, e.g. nginx:1.27, " +
  "localhost:5000/team/app:1.2.3 or ghcr.io/org/app@sha256:<64 hex digits>";

/**
 * Replaces the `pattern` of `spec.image` with an equivalent CEL rule carrying a readable message,
 * so a missing tag is reported as `spec.image: ... must be an image reference with a tag...`
 * rather than as a 400-character regular expression. CEL's `matches` is RE2, as `pattern` is.
 */
function withReadableImageError(spec: Record<string, unknown>): Record<string, unknown> {
  // deno-lint-ignore no-explicit-any
  const image = (spec as any).properties.image;
  delete image.pattern;
  image["x-kubernetes-validations"] = [{
    rule: `self.matches(${JSON.stringify(IMAGE_PATTERN)})`,
    message: IMAGE_MESSAGE,
  }];
  return spec;
}

/** The CustomResourceDefinition (apiextensions.k8s.io/v1) for AppService. */
export function appServiceCrd(): Record<string, unknown> {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${PLURAL}.${GROUP}` },
    spec: {
      group: GROUP,
      scope: "Namespaced",
      names: {
        kind: KIND,
        listKind: `${KIND}List`,
        plural: PLURAL,
        singular: "appservice",
        shortNames: ["as"],
      },
      versions: [{
        name: VERSION,
        served: true,
        storage: true,
        // `kubectl scale as NAME --replicas=N` and HorizontalPodAutoscalers use the scale subresource.
        subresources: {
          status: {},
          scale: {
            specReplicasPath: ".spec.replicas",
            statusReplicasPath: ".status.replicas",
            labelSelectorPath: ".status.selector",
          },
        },
        additionalPrinterColumns: [
          { name: "Ready", type: "boolean", jsonPath: ".status.ready" },
          { name: "Replicas", type: "string", jsonPath: ".status.replicasSummary" },
          // Why it is (not) Ready: the Ready condition's reason, e.g. ImagePullBackOff.
          {
            name: "Reason",
            type: "string",
            jsonPath: '.status.conditions[?(@.type=="Ready")].reason',
          },
          { name: "Image", type: "string", jsonPath: ".spec.image" },
          { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
          // `kubectl get as -o wide`: the Ready condition's message, naming the Pod.
          {
            name: "Message",
            type: "string",
            priority: 1,
            jsonPath: '.status.conditions[?(@.type=="Ready")].message',
          },
        ],
        schema: {
          openAPIV3Schema: {
            type: "object",
            description:
              "AppService runs `replicas` Pods of one image, and a Service for its ports.",
            required: ["spec"],
            // The name becomes the Service's name (a DNS-1035 label) and a label value (63
            // characters at most), so a name that cannot be used is refused at once.
            "x-kubernetes-validations": [{
              rule: "self.metadata.name.size() <= 63 && " +
                "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
              message: NAME_MESSAGE,
            }],
            properties: {
              apiVersion: { type: "string" },
              kind: { type: "string" },
              metadata: { type: "object" },
              spec: withReadableImageError(toStructural(AppServiceSpec)),
              status: toStructural(AppServiceStatus),
            },
          },
        },
      }],
    },
  };
}
