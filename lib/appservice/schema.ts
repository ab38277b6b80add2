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

import { CONTAINER_NAME, GROUP, KIND, PLURAL, VERSION } from "./api.ts";
import {
  QUANTITY_MAX_LENGTH,
  QUANTITY_PATTERN,
  quantityIsInteger,
  quantityNanos,
} from "./quantity.ts";
import { type CelRule, celRule, celString, checkRules } from "./rules.ts";
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

/** Message of the image validation rule (what users see instead of the regular expression). */
export const IMAGE_MESSAGE: string =
  "must be an image reference with a tag and/or a digest, e.g. nginx:1.27, " +
  "localhost:5000/team/app:1.2.3 or ghcr.io/org/app@sha256:<64 hex digits>";

/**
 * `spec.image` as a CEL rule rather than a `pattern`, so a missing tag is reported as
 * `spec.image: ... must be an image reference with a tag...` rather than as a 400-character
 * regular expression. CEL's `matches` is RE2, as `pattern` is.
 */
const IMAGE_RE = new RegExp(IMAGE_PATTERN);
const IMAGE_RULE = celRule({
  rule: `self.matches(${celString(IMAGE_PATTERN)})`,
  message: IMAGE_MESSAGE,
}, (s: string) => IMAGE_RE.test(s));

/** Message of the name validation rule (the apiserver prefixes `metadata.name: Invalid value`). */
export const NAME_MESSAGE: string =
  "must be at most 63 characters of lower-case letters, digits and '-', starting with a " +
  "letter (it names the Service and labels the Pods)";
/**
 * The name rule, on `metadata.name` itself (the one place a CRD may restrict metadata), so the
 * answer names the field (`metadata.name: Invalid value: "my.app": must be ...`); at the root it
 * read `<nil>: Invalid value`. One CEL rule for length and form: a `maxLength` of 63 would be a
 * schema error, after which the apiserver adds a confusing "some validation rules were not
 * checked" line.
 */
const NAME_RULE = celRule({
  rule: "self.size() <= 63 && self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
  message: NAME_MESSAGE,
}, (n: string) => n.length <= 63 && /^[a-z]([-a-z0-9]*[a-z0-9])?$/.test(n));

/** `schema` with a description (shown by `kubectl explain`); a shared schema keeps its own. */
function described<T extends TSchema>(schema: T, description: string): T {
  return { ...schema, description };
}

/** DNS-1123 subdomain (IsDNS1123Subdomain, k8s.io/apimachinery/pkg/util/validation). */
export const DNS1123_SUBDOMAIN: string =
  "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
/** Name part of a qualified name (IsQualifiedName): at most 63 characters. */
export const QUALIFIED_NAME: string = "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?";

/**
 * Environment variable names every Kubernetes version accepts: IsEnvVarName
 * (`[-._a-zA-Z][-._a-zA-Z0-9]*`, not `.`, `..` or starting with `..`). Kubernetes 1.34+ relaxes
 * this to printable ASCII except `=` (RelaxedEnvironmentVariableValidation); the CRD keeps the
 * rule that holds on every cluster.
 */
export const ENV_NAME_PATTERN: string =
  "^([-_a-zA-Z][-._a-zA-Z0-9]*|\\.[-_a-zA-Z0-9][-._a-zA-Z0-9]*)$";
/** ConfigMap and Secret keys (IsConfigMapKey): `[-._a-zA-Z0-9]+`, not `.`, `..` or `..*`. */
export const CONFIG_KEY_PATTERN =
  "^([-_a-zA-Z0-9][-._a-zA-Z0-9]*|\\.[-_a-zA-Z0-9][-._a-zA-Z0-9]*)$";

const ONE_E = quantityNanos("1E")!;
const ONE_P = quantityNanos("1P")!;
const Q_RE = new RegExp(QUANTITY_PATTERN);
/** CEL: `x` (an int-or-string) is a quantity of our form (guards every `quantity()` call). */
const celIsQ = (x: string) => `string(${x}).matches(${celString(QUANTITY_PATTERN)})`;
/** CEL: the quantity of `x`. */
const celQ = (x: string) => `quantity(string(${x}))`;
const isQ = (v: unknown) =>
  (typeof v === "number" || typeof v === "string") && Q_RE.test(String(v));

/** Message of the quantity rule. */
export const QUANTITY_MESSAGE: string =
  "must be a quantity such as 500m, 2, 1.5Gi or 1e3: not negative, " +
  "at most 1E, with an exponent of at most two digits";

/**
 * A resource quantity ("500m", "128Mi", 2): int-or-string. Not negative (ValidateNonnegativeQuantity),
 * at most 1E (far above any container; it keeps every value inside int64 where the Pod API
 * computes with it), and of the {@link QUANTITY_PATTERN} form.
 */
const Quantity = Type.Union([Type.Integer(), Type.String()], {
  "x-kubernetes-int-or-string": true,
  maxLength: QUANTITY_MAX_LENGTH,
  "x-kubernetes-validations": [
    celRule({
      rule: `${celIsQ("self")} && ${celQ("self")}.compareTo(quantity('1E')) <= 0`,
      message: QUANTITY_MESSAGE,
    }, (v) => {
      const n = quantityNanos(v);
      return n !== undefined && n <= ONE_E;
    }),
  ],
});

/** Divisors the Pod API accepts (validContainerResourceDivisorFor*, pkg/apis/core/validation). */
const CPU_DIVISORS = ["1m", "1"];
const BYTE_DIVISORS = [
  "1",
  "1k",
  "1M",
  "1G",
  "1T",
  "1P",
  "1E",
  "1Ki",
  "1Mi",
  "1Gi",
  "1Ti",
  "1Pi",
  "1Ei",
];

const KeySelector = (what: string) =>
  Type.Object({
    name: Type.String({
      maxLength: 253,
      pattern: `^${DNS1123_SUBDOMAIN}$`,
      description: `Name of the ${what} (a DNS-1123 subdomain).`,
    }),
    key: Type.String({
      maxLength: 253,
      pattern: CONFIG_KEY_PATTERN,
      description: `Key in the ${what}.`,
    }),
    optional: Type.Optional(Type.Boolean({
      description: `Start the container even when the ${what} or its key is missing.`,
    })),
  }, { description: `A key of a ${what} in the AppService's namespace.` });

/** Downward API field paths a container's env may read (validEnvDownwardAPIFieldPathExpressions). */
export const FIELD_PATH_PATTERN: string =
  "^(metadata\\.(name|namespace|uid)|spec\\.(nodeName|serviceAccountName)|" +
  "status\\.(hostIPs?|podIPs?)|" +
  `metadata\\.(labels|annotations)\\['(${DNS1123_SUBDOMAIN}/)?${QUALIFIED_NAME}'\\])$`;
const FIELD_PATH_RE = new RegExp(FIELD_PATH_PATTERN);

/** core/v1 ObjectFieldSelector as an env source (validateObjectFieldSelector). */
const FieldRef = Type.Object({
  apiVersion: Type.Optional(Type.Literal("v1", { description: "Only v1." })),
  fieldPath: Type.String({
    maxLength: 341,
    description: "metadata.name, metadata.namespace, metadata.uid, spec.nodeName, " +
      "spec.serviceAccountName, status.hostIP(s), status.podIP(s), metadata.labels['<key>'] or " +
      "metadata.annotations['<key>'].",
    "x-kubernetes-validations": [
      celRule(
        {
          rule: `self.matches(${celString(FIELD_PATH_PATTERN)}) && ` +
            "(!self.contains('/') || self.indexOf('/') - self.indexOf('[') - 2 <= 253)",
          message: "must be metadata.name, metadata.namespace, metadata.uid, spec.nodeName, " +
            "spec.serviceAccountName, status.hostIP, status.hostIPs, status.podIP, status.podIPs, " +
            "metadata.labels['<key>'] or metadata.annotations['<key>'] (a label key)",
        },
        (s: string) =>
          FIELD_PATH_RE.test(s) && (!s.includes("/") || s.indexOf("/") - s.indexOf("[") - 2 <= 253),
      ),
    ],
  }),
});

/** core/v1 ResourceFieldSelector as an env source (validateContainerResourceFieldSelector). */
const ResourceFieldRef = Type.Object({
  containerName: Type.Optional(Type.Literal(CONTAINER_NAME, {
    description: `The one container, "${CONTAINER_NAME}" (default).`,
  })),
  resource: Type.String({
    maxLength: 100,
    pattern: "^(limits|requests)\\.(cpu|memory|ephemeral-storage|hugepages-.*)$",
    description: "limits.cpu, requests.memory, limits.ephemeral-storage, requests.hugepages-2Mi...",
  }),
  divisor: Type.Optional(Type.Union([Type.Integer(), Type.String()], {
    "x-kubernetes-int-or-string": true,
    maxLength: 8,
    description: "Unit of the value: 1m or 1 for cpu; 1, 1k...1E or 1Ki...1Ei otherwise " +
      "(default 1).",
  })),
}, {
  "x-kubernetes-validations": [
    celRule({
      rule: "!has(self.divisor) || string(self.divisor) in (self.resource.endsWith('.cpu') ? " +
        `${JSON.stringify(CPU_DIVISORS)} : ${JSON.stringify(BYTE_DIVISORS)})`,
      message: `must be ${CPU_DIVISORS.join(" or ")} for cpu, and one of ${
        BYTE_DIVISORS.join(", ")
      } for memory, ephemeral-storage and hugepages`,
      fieldPath: ".divisor",
    }, (r) =>
      r.divisor === undefined ||
      (r.resource.endsWith(".cpu") ? CPU_DIVISORS : BYTE_DIVISORS).includes(String(r.divisor))),
  ],
});

const ENV_SOURCES = ["fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"] as const;

/** core/v1 EnvVar (ValidateEnv, validateEnvVarValueFrom). */
export const EnvVar = Type.Object({
  name: Type.String({
    minLength: 1,
    pattern: ENV_NAME_PATTERN,
    description: "Environment variable name (letters, digits, '_', '-', '.'; not starting " +
      "with a digit or '..').",
  }),
  value: Type.Optional(Type.String({
    description: "The value; $(NAME) references to earlier variables are expanded by the kubelet.",
  })),
  valueFrom: Type.Optional(Type.Object({
    fieldRef: Type.Optional(
      described(FieldRef, "A field of the Pod (downward API), e.g. metadata.name or status.podIP."),
    ),
    resourceFieldRef: Type.Optional(
      described(ResourceFieldRef, "A resource limit or request of the container."),
    ),
    configMapKeyRef: Type.Optional(KeySelector("ConfigMap")),
    secretKeyRef: Type.Optional(KeySelector("Secret")),
  }, {
    description: "Where the value comes from (exactly one source; not with a non-empty value). " +
      "A missing ConfigMap or Secret keeps the Pod in CreateContainerConfigError until it exists.",
    "x-kubernetes-validations": [
      celRule({
        rule: ENV_SOURCES.map((k) => `(has(self.${k}) ? 1 : 0)`).join(" + ") + " == 1",
        message: `must set exactly one of ${ENV_SOURCES.join(", ")}`,
      }, (v) => ENV_SOURCES.filter((k) => v[k] !== undefined).length === 1),
    ],
  })),
}, {
  "x-kubernetes-validations": [
    celRule({
      rule: "!has(self.valueFrom) || !has(self.value) || size(self.value) == 0",
      message: "may not be set when value is not empty",
      fieldPath: ".valueFrom",
    }, (e) => e.valueFrom === undefined || !e.value),
  ],
});

/** IANA_SVC_NAME (IsValidPortName): the Pod's and the Service's port names. */
const PORT_NAME_MESSAGE = "must be an IANA service name: at most 15 lower-case letters, digits " +
  "and single inner hyphens, with at least one letter (e.g. http, metrics-2)";

/** core/v1 ContainerPort (validateContainerPorts). */
export const ContainerPort = Type.Object({
  containerPort: Type.Integer({ minimum: 1, maximum: 65535, description: "Port number." }),
  name: Type.Optional(Type.String({
    maxLength: 15,
    description: "IANA_SVC_NAME; also the Service port name.",
    "x-kubernetes-validations": [
      celRule({
        rule: "self.matches('^[a-z0-9]+(-[a-z0-9]+)*$') && self.matches('[a-z]')",
        message: PORT_NAME_MESSAGE,
      }, (n: string) => /^[a-z0-9]+(-[a-z0-9]+)*$/.test(n) && /[a-z]/.test(n)),
    ],
  })),
  protocol: Type.Optional(Type.Union([
    Type.Literal("TCP"),
    Type.Literal("UDP"),
    Type.Literal("SCTP"),
  ], { default: "TCP", description: "TCP (default), UDP or SCTP; the Service port's too." })),
  hostIP: Type.Optional(Type.String({
    maxLength: 45,
    description: "Host IP to bind hostPort to.",
  })),
  hostPort: Type.Optional(Type.Integer({
    minimum: 1,
    maximum: 65535,
    description: "Port on the Node to expose the container port on (rarely needed).",
  })),
});

type PortT = {
  name?: string;
  containerPort: number;
  protocol?: string;
  hostIP?: string;
  hostPort?: number;
};

/**
 * The port list: at most one entry per containerPort and protocol (list-map keys, as
 * core/v1 Container.ports declares them; the Service refuses a duplicate port/protocol), unique
 * names (validateContainerPorts, validateServicePort) and unique host ports per protocol and
 * hostIP (AccumulateUniqueHostPorts).
 */
const Ports = Type.Array(ContainerPort, {
  maxItems: 20,
  description: "Container ports (at most 20). Each is also a port of the ClusterIP Service named " +
    "like the AppService; without ports there is no Service. Changing them replaces the Pods.",
  "x-kubernetes-list-type": "map",
  "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
  "x-kubernetes-validations": [
    celRule(
      {
        rule: "self.all(p, !has(p.name) || self.exists_one(q, has(q.name) && q.name == p.name))",
        message: "port names must be unique (each names a port of the Pod and of the Service)",
      },
      (ps: PortT[]) =>
        ps.every((p) => p.name === undefined || ps.filter((q) => q.name === p.name).length === 1),
    ),
    celRule({
      rule: "self.all(p, !has(p.hostPort) || self.exists_one(q, has(q.hostPort) && " +
        "q.hostPort == p.hostPort && q.protocol == p.protocol && " +
        "(has(q.hostIP) ? q.hostIP : '') == (has(p.hostIP) ? p.hostIP : '')))",
      message: "hostPort must be unique per protocol and hostIP",
    }, (ps: PortT[]) =>
      ps.every((p) =>
        p.hostPort === undefined ||
        ps.filter((q) =>
            q.hostPort === p.hostPort && q.protocol === p.protocol &&
            (q.hostIP ?? "") === (p.hostIP ?? "")
          ).length === 1
      )),
  ],
});

/** Resource names a container may ask for (validateContainerResourceName). */
export const HUGEPAGES_PATTERN: string = "^hugepages-[1-9][0-9]{0,3}(Ki|Mi|Gi)$";
/** Extended resources `<domain>/<name>` (IsExtendedResourceName); `*kubernetes.io/` is native. */
export const EXTENDED_RESOURCE_PATTERN: string = `^${DNS1123_SUBDOMAIN}/${QUALIFIED_NAME}$`;
const HUGEPAGES_RE = new RegExp(HUGEPAGES_PATTERN);
const EXTENDED_RE = new RegExp(EXTENDED_RESOURCE_PATTERN);
const STANDARD_RESOURCES = ["cpu", "memory", "ephemeral-storage"];
/** Not overcommittable: requests must equal limits (IsOvercommitAllowed is false). */
const celExact = (k: string) => `(${k}.contains('/') || ${k}.startsWith('hugepages-'))`;
const isExact = (k: string) => k.includes("/") || k.startsWith("hugepages-");
const isResourceName = (k: string) =>
  STANDARD_RESOURCES.includes(k) || HUGEPAGES_RE.test(k) ||
  (EXTENDED_RE.test(k) && !k.startsWith("requests.") && !k.includes("kubernetes.io/") &&
    k.indexOf("/") <= 244);

/** core/v1 ResourceList: resource name -> quantity. */
const ResourceList = Type.Record(Type.String(), Quantity, {
  maxProperties: 8,
  "x-kubernetes-validations": [
    celRule({
      rule: `self.all(k, k in ${JSON.stringify(STANDARD_RESOURCES)} || ` +
        `k.matches(${celString(HUGEPAGES_PATTERN)}) || ` +
        `(k.matches(${celString(EXTENDED_RESOURCE_PATTERN)}) && !k.startsWith('requests.') && ` +
        "!k.contains('kubernetes.io/') && k.indexOf('/') <= 244))",
      message: "resource names must be cpu, memory, ephemeral-storage, hugepages-<n>Ki|Mi|Gi " +
        "or an extended resource <domain>/<name> (e.g. example.com/gpu; not *kubernetes.io/)",
    }, (l: Record<string, unknown>) => Object.keys(l).every(isResourceName)),
    celRule({
      rule: `self.all(k, !k.contains('/') || !${celIsQ("self[k]")} || ` +
        `(${celQ("self[k]")}.isInteger() && ${celQ("self[k]")}.compareTo(quantity('1P')) <= 0))`,
      message: "extended resources (<domain>/<name>) must be whole numbers of at most 1P",
    }, (l: Record<string, unknown>) =>
      Object.entries(l).every(([k, v]) => {
        const n = quantityNanos(v);
        return !k.includes("/") || !isQ(v) ||
          (n !== undefined && quantityIsInteger(v) && n <= ONE_P);
      })),
    celRule({
      rule: `self.all(k, !k.matches(${celString(HUGEPAGES_PATTERN)}) || !${celIsQ("self[k]")} || ` +
        `(${celQ("self[k]")}.isInteger() && ` +
        `${celQ("self[k]")}.asInteger() % quantity(k.substring(10)).asInteger() == 0))`,
      message: "hugepages-<size> must be a whole multiple of <size>",
    }, (l: Record<string, unknown>) =>
      Object.entries(l).every(([k, v]) => {
        const n = quantityNanos(v);
        const page = quantityNanos(k.slice(10));
        return !HUGEPAGES_RE.test(k) || !isQ(v) ||
          (n !== undefined && page !== undefined && quantityIsInteger(v) && n % page === 0n);
      })),
  ],
});

type ResourcesT = { limits?: Record<string, unknown>; requests?: Record<string, unknown> };

/**
 * core/v1 ResourceRequirements (limits, requests), with the Pod API's rules across the two maps
 * (validateResourceRequirements): a request at most its limit, equal to it for hugepages and
 * extended resources, which also need a limit; hugepages need cpu or memory.
 */
export const ResourceRequirements = Type.Object({
  limits: Type.Optional(
    described(
      ResourceList,
      "Most of each resource the container may use, e.g. {cpu: 500m, memory: 256Mi}.",
    ),
  ),
  requests: Type.Optional(
    described(
      ResourceList,
      "Resources the scheduler reserves for the container (at most the limit).",
    ),
  ),
}, {
  description: "CPU, memory and other resources of the container (core/v1 " +
    "ResourceRequirements). Changing them replaces the Pods.",
  "x-kubernetes-validations": [
    celRule({
      rule: "!has(self.requests) || !has(self.limits) || self.requests.all(k, " +
        `!(k in self.limits) || !${celIsQ("self.requests[k]")} || !${
          celIsQ("self.limits[k]")
        } || ` +
        `(${celExact("k")} ? ${celQ("self.requests[k]")}.compareTo(${
          celQ("self.limits[k]")
        }) == 0` +
        ` : ${celQ("self.requests[k]")}.compareTo(${celQ("self.limits[k]")}) <= 0))`,
      message: "a request must not exceed its limit (and must equal it for hugepages and " +
        "extended resources)",
      fieldPath: ".requests",
    }, (r: ResourcesT) =>
      Object.entries(r.requests ?? {}).every(([k, v]) => {
        if (!r.limits || !(k in r.limits) || !isQ(v) || !isQ(r.limits[k])) return true;
        const req = quantityNanos(v), lim = quantityNanos(r.limits[k]);
        if (req === undefined || lim === undefined) return false;
        return isExact(k) ? req === lim : req <= lim;
      })),
    celRule(
      {
        rule: "!has(self.requests) || self.requests.all(k, " +
          `!${celExact("k")} || (has(self.limits) && k in self.limits))`,
        message: "hugepages and extended resources that are requested need a limit (equal to " +
          "the request)",
        fieldPath: ".limits",
        reason: "FieldValueRequired",
      },
      (r: ResourcesT) =>
        Object.keys(r.requests ?? {}).every((k) =>
          !isExact(k) || (r.limits !== undefined && k in r.limits)
        ),
    ),
    celRule({
      rule: "!((has(self.limits) && self.limits.exists(k, k.startsWith('hugepages-'))) || " +
        "(has(self.requests) && self.requests.exists(k, k.startsWith('hugepages-')))) || " +
        "(has(self.limits) && ('cpu' in self.limits || 'memory' in self.limits)) || " +
        "(has(self.requests) && ('cpu' in self.requests || 'memory' in self.requests))",
      message: "hugepages need a cpu or memory request or limit",
      reason: "FieldValueForbidden",
    }, (r: ResourcesT) => {
      const keys = [...Object.keys(r.limits ?? {}), ...Object.keys(r.requests ?? {})];
      return !keys.some((k) => k.startsWith("hugepages-")) ||
        keys.some((k) => k === "cpu" || k === "memory");
    }),
  ],
});

/** Restart policies a Pod accepts. */
export const RestartPolicy = Type.Union([
  Type.Literal("Always"),
  Type.Literal("OnFailure"),
  Type.Literal("Never"),
], {
  default: "Always",
  description:
    "Pod restartPolicy: Always (default), OnFailure or Never. Under OnFailure or Never a " +
    "Pod whose app exits 0 is not restarted; a Failed Pod is replaced, with growing delay when it " +
    "fails again.",
});

/** Largest value of an int32 field of the Kubernetes API. */
const INT32_MAX = 2147483647;

/** A non-negative int32 field, in seconds or a count. */
const NonNegInt32 = (description: string) =>
  Type.Optional(Type.Integer({ minimum: 0, maximum: INT32_MAX, description }));

/** IANA_SVC_NAME rule twin (IsValidPortName). */
const isPortName = (n: string) =>
  /^[a-z0-9]+(-[a-z0-9]+)*$/.test(n) && /[a-z]/.test(n) &&
  n.length <= 15;

/**
 * A port by number (1-65535) or by name (IANA_SVC_NAME), as a probe names it (intstr.IntOrString,
 * validatePortNumOrName).
 */
const PortNumOrName = Type.Union([Type.Integer(), Type.String()], {
  "x-kubernetes-int-or-string": true,
  maxLength: 15,
  description: "Port number (1-65535) or the name of a container port.",
  "x-kubernetes-validations": [
    celRule(
      {
        rule: "type(self) == int ? (self >= 1 && self <= 65535) : " +
          "(self.matches('^[a-z0-9]+(-[a-z0-9]+)*$') && self.matches('[a-z]'))",
        message: `must be a port number from 1 to 65535 or a port name that ${PORT_NAME_MESSAGE}`,
      },
      (v: unknown) =>
        typeof v === "number"
          ? Number.isInteger(v) && v >= 1 && v <= 65535
          : typeof v === "string" && isPortName(v),
    ),
  ],
});

const PROBE_HANDLERS = ["exec", "httpGet", "tcpSocket", "grpc"] as const;

/** A probe has exactly one handler (validateHandler). */
const PROBE_ONE_HANDLER = celRule({
  rule: PROBE_HANDLERS.map((k) => `(has(self.${k}) ? 1 : 0)`).join(" + ") + " == 1",
  message: `must set exactly one handler: ${PROBE_HANDLERS.join(", ")}`,
}, (v) => PROBE_HANDLERS.filter((k) => v[k] !== undefined).length === 1);
/** A readiness probe has no terminationGracePeriodSeconds (validateReadinessProbe). */
const PROBE_NO_GRACE = celRule({
  rule: "!has(self.terminationGracePeriodSeconds)",
  message: "must not be set for readinessProbes",
  fieldPath: ".terminationGracePeriodSeconds",
  reason: "FieldValueForbidden",
}, (v) => v.terminationGracePeriodSeconds === undefined);
/** Liveness and startup probes pass after one success (validateLivenessProbe, ...Startup...). */
const PROBE_SUCCESS_ONE = celRule({
  rule: "!has(self.successThreshold) || self.successThreshold <= 1",
  message: "must be 1 for liveness and startup probes",
  fieldPath: ".successThreshold",
}, (v) => v.successThreshold === undefined || v.successThreshold <= 1);

/**
 * core/v1 Probe (validateProbe, validateHandler): exactly one handler; thresholds and times not
 * negative (0 takes the apiserver's default: timeout 1 s, period 10 s, success 1, failure 3);
 * `successThreshold` only 1 for liveness and startup probes (validateLivenessProbe,
 * validateStartupProbe); `terminationGracePeriodSeconds` above 0 and not on a readiness probe.
 */
function probe(kind: "readiness" | "liveness" | "startup", description: string) {
  const rules = [PROBE_ONE_HANDLER, kind === "readiness" ? PROBE_NO_GRACE : PROBE_SUCCESS_ONE];
  return Type.Object({
    exec: Type.Optional(Type.Object({
      command: Type.Array(Type.String(), {
        minItems: 1,
        maxItems: 64,
        description: "The command and its arguments, run in the container (no shell); exit 0 " +
          "passes.",
      }),
    }, { description: "Run a command in the container." })),
    httpGet: Type.Optional(Type.Object({
      path: Type.Optional(Type.String({ maxLength: 2048, description: "Path, e.g. /healthz." })),
      port: PortNumOrName,
      host: Type.Optional(Type.String({
        maxLength: 253,
        description: "Host to connect to (default: the Pod IP).",
      })),
      scheme: Type.Optional(Type.Union([Type.Literal("HTTP"), Type.Literal("HTTPS")], {
        description: "HTTP (default) or HTTPS.",
      })),
      httpHeaders: Type.Optional(Type.Array(
        Type.Object({
          name: Type.String({
            minLength: 1,
            maxLength: 256,
            pattern: "^[-A-Za-z0-9]+$",
            description: "Header name.",
          }),
          value: Type.String({ maxLength: 4096, description: "Header value." }),
        }),
        { maxItems: 20, description: "Headers to send." },
      )),
    }, { description: "An HTTP GET; a status from 200 to 399 passes." })),
    tcpSocket: Type.Optional(Type.Object({
      port: PortNumOrName,
      host: Type.Optional(Type.String({
        maxLength: 253,
        description: "Host to connect to (default: the Pod IP).",
      })),
    }, { description: "A TCP connection; opening it passes." })),
    grpc: Type.Optional(Type.Object({
      port: Type.Integer({ minimum: 1, maximum: 65535, description: "Port number." }),
      service: Type.Optional(Type.String({
        maxLength: 256,
        description: "Service name for the gRPC health check (default: the server's).",
      })),
    }, { description: "A gRPC health check (grpc.health.v1)." })),
    initialDelaySeconds: NonNegInt32("Seconds after the container started before the first probe."),
    timeoutSeconds: NonNegInt32("Seconds before a probe times out (0: default 1)."),
    periodSeconds: NonNegInt32("Seconds between probes (0: default 10)."),
    successThreshold: NonNegInt32(
      "Passes in a row after a failure to count as passing (0: default 1; only 1 for liveness " +
        "and startup probes).",
    ),
    failureThreshold: NonNegInt32("Failures in a row to count as failing (0: default 3)."),
    terminationGracePeriodSeconds: Type.Optional(Type.Integer({
      minimum: 1,
      maximum: INT32_MAX,
      description: "Grace period when a failing probe kills the container (liveness and startup " +
        "probes only).",
    })),
  }, { description, "x-kubernetes-validations": rules });
}

/** The int-or-percent rule with percentages up to `maxPercent` (one registration per bound). */
function intOrPercentRule(maxPercent: number) {
  return celRule(
    {
      rule: "type(self) == int ? (self >= 0 && self <= 999) : " +
        `(self.matches('^[0-9]{1,3}%$') && int(self.replace('%', '')) <= ${maxPercent})`,
      message: `must be a whole number from 0 to 999 or a percentage from 0% to ${maxPercent}%`,
    },
    (v: unknown) =>
      typeof v === "number"
        ? Number.isInteger(v) && v >= 0 && v <= 999
        : typeof v === "string" && /^[0-9]{1,3}%$/.test(v) && Number(v.slice(0, -1)) <= maxPercent,
  );
}
const SURGE_RULE = intOrPercentRule(999);
const UNAVAILABLE_RULE = intOrPercentRule(100);

/**
 * An int-or-percent (`3` or `"25%"`), as Deployment's rollingUpdate takes it, checked by `rule`
 * ({@link SURGE_RULE} or {@link UNAVAILABLE_RULE}).
 */
function intOrPercent(description: string, rule: CelRule) {
  return Type.Union([Type.Integer(), Type.String()], {
    "x-kubernetes-int-or-string": true,
    maxLength: 5,
    description,
    "x-kubernetes-validations": [rule],
  });
}

/** `maxSurge` and `maxUnavailable` both zero (or maxSurge zero and maxUnavailable left out). */
const ZERO_RE = /^0+%?$/;

/** spec.strategy: how Pods are replaced when the spec changes (Deployment's RollingUpdate). */
export const Strategy = Type.Object({
  rollingUpdate: Type.Optional(Type.Object({
    maxSurge: Type.Optional(intOrPercent(
      "Pods that may exist above replicas during a rollout: a number, or a percentage of " +
        "replicas rounded up (default 25%, at least 1 Pod).",
      SURGE_RULE,
    )),
    maxUnavailable: Type.Optional(intOrPercent(
      "Pods that may be unavailable below replicas during a rollout: a number, or a " +
        "percentage of replicas rounded down (default 0: capacity never drops).",
      UNAVAILABLE_RULE,
    )),
  }, {
    description: "Bounds of a rolling update.",
    "x-kubernetes-validations": [
      celRule({
        rule: "!(has(self.maxSurge) && string(self.maxSurge).matches('^0+%?$') && " +
          "(!has(self.maxUnavailable) || string(self.maxUnavailable).matches('^0+%?$')))",
        message: "maxSurge and maxUnavailable may not both be 0 (maxUnavailable defaults to 0): " +
          "no Pod could ever be replaced",
        fieldPath: ".maxSurge",
      }, (v) =>
        !(v.maxSurge !== undefined && ZERO_RE.test(String(v.maxSurge)) &&
          (v.maxUnavailable === undefined || ZERO_RE.test(String(v.maxUnavailable))))),
    ],
  })),
}, {
  description: "How Pods are replaced when the spec changes: new Pods first (maxSurge), while at " +
    "least replicas - maxUnavailable Pods stay available.",
});

/** spec.podDisruptionBudget: the owned PodDisruptionBudget (lib/appservice/disruption.ts). */
export const DisruptionBudget = Type.Object({
  enabled: Type.Optional(Type.Boolean({
    description: "false: no PodDisruptionBudget (an existing one is deleted). Default: one when " +
      "replicas >= 2 or maxUnavailable is set.",
  })),
  maxUnavailable: Type.Optional(intOrPercent(
    "Pods a voluntary disruption (kubectl drain, a Node scale-down) may take at a time: a " +
      "number or a percentage. Default: strategy.rollingUpdate.maxUnavailable, at least 1, so a " +
      "drain always finishes; 0 keeps every Pod until it is moved by hand (the drain waits).",
    UNAVAILABLE_RULE,
  )),
}, {
  description: "The PodDisruptionBudget named like the AppService that the operator keeps for " +
    "its Pods.",
});

/** AppService spec. */
export const AppServiceSpec = Type.Object({
  image: Type.String({
    minLength: 1,
    maxLength: 512,
    "x-kubernetes-validations": [IMAGE_RULE],
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
  env: Type.Optional(Type.Array(EnvVar, {
    maxItems: 100,
    description: "Environment variables of the container (one entry per name, at most 100). " +
      "Changing them replaces the Pods.",
    // One entry per name, as core/v1 Container.env declares it (a later duplicate would silently
    // hide an earlier one).
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
  })),
  ports: Type.Optional(Ports),
  restartPolicy: Type.Optional(RestartPolicy),
  readinessProbe: Type.Optional(probe(
    "readiness",
    "When the container can serve (core/v1 Probe): until it passes, the Pod is not Ready, gets " +
      "no Service traffic and does not count as available in a rollout. Changing it replaces " +
      "the Pods.",
  )),
  livenessProbe: Type.Optional(probe(
    "liveness",
    "When the container must be restarted (core/v1 Probe). Changing it replaces the Pods.",
  )),
  startupProbe: Type.Optional(probe(
    "startup",
    "Holds the other probes until the app has started (core/v1 Probe). Changing it replaces " +
      "the Pods.",
  )),
  strategy: Type.Optional(Strategy),
  podDisruptionBudget: Type.Optional(DisruptionBudget),
  minReadySeconds: Type.Optional(Type.Integer({
    minimum: 0,
    maximum: INT32_MAX,
    description: "Seconds a Pod must have been Ready to count as available (default 0).",
  })),
  progressDeadlineSeconds: Type.Optional(Type.Integer({
    minimum: 1,
    maximum: INT32_MAX,
    description: "Seconds a rollout may make no progress before Progressing turns False with " +
      "reason ProgressDeadlineExceeded (default 600); the old Pods keep serving.",
  })),
}, {
  description: "What to run: `replicas` Pods of one container image, with its env, ports, " +
    "resources, probes and restartPolicy, and a ClusterIP Service for its ports. A change of " +
    "anything but replicas and the rollout fields rolls the Pods over, new ones first.",
  "x-kubernetes-validations": [
    celRule(
      {
        rule: "!has(self.progressDeadlineSeconds) || " +
          "self.progressDeadlineSeconds > (has(self.minReadySeconds) ? self.minReadySeconds : 0)",
        message: "must be greater than minReadySeconds",
        fieldPath: ".progressDeadlineSeconds",
      },
      (v) =>
        v.progressDeadlineSeconds === undefined ||
        v.progressDeadlineSeconds > (v.minReadySeconds ?? 0),
    ),
  ],
});

/** meta/v1 Condition. */
export const Condition = Type.Object({
  type: Type.String({ description: "Ready, Available, Progressing or Degraded." }),
  status: Type.Union([Type.Literal("True"), Type.Literal("False"), Type.Literal("Unknown")], {
    description: "True, False or Unknown.",
  }),
  reason: Type.String({
    description: "Why, in one UpperCamelCase word (see the table in docs/api.md).",
  }),
  message: Type.String({ description: "Why, for humans: names the Pod and the cause." }),
  lastTransitionTime: Type.String({
    format: "date-time",
    description: "When status last changed (not when reason or message did).",
  }),
  observedGeneration: Type.Optional(Type.Integer({
    minimum: 0,
    description: "The metadata.generation the condition was computed from.",
  })),
  lastUpdateTime: Type.Optional(Type.String({
    format: "date-time",
    description: "Progressing only, while a rollout runs: when it last made progress (as " +
      "Deployment's condition); progressDeadlineSeconds counts from here.",
  })),
});

/** One state of a container, as core/v1 ContainerState reports it (timestamps left out but `startedAt`). */
export const ContainerStateEntry = Type.Object({
  waiting: Type.Optional(Type.Object({
    reason: Type.Optional(Type.String({ description: "e.g. ImagePullBackOff, CrashLoopBackOff." })),
    message: Type.Optional(Type.String({ description: "The kubelet's message (cut at 512)." })),
  }, { description: "Not running yet, or waiting to be restarted." })),
  running: Type.Optional(Type.Object({
    startedAt: Type.Optional(Type.String({ description: "When the container started." })),
  }, { description: "Running." })),
  terminated: Type.Optional(Type.Object({
    reason: Type.Optional(Type.String({ description: "e.g. OOMKilled, Error, Completed." })),
    exitCode: Type.Integer({ description: "The container's exit code." }),
    signal: Type.Optional(Type.Integer({ description: "The signal that ended it, if any." })),
    message: Type.Optional(Type.String({ description: "The kubelet's message (cut at 512)." })),
  }, { description: "Ended." })),
});

/** One container of an owned Pod, from core/v1 ContainerStatus. */
export const ContainerStatusEntry = Type.Object({
  name: Type.String({ description: "Container name." }),
  ready: Type.Boolean({ description: "Whether it passes its readiness check." }),
  restartCount: Type.Integer({ minimum: 0, description: "Restarts by the kubelet." }),
  state: Type.Optional(described(ContainerStateEntry, "Its state now.")),
  lastState: Type.Optional(
    described(ContainerStateEntry, "How its last run ended, if it ran before."),
  ),
});

/** One owned Pod as reported in status. */
export const PodStatusEntry = Type.Object({
  name: Type.String({ description: "Pod name, <AppService name>-<slot>." }),
  phase: Type.String({
    description: "Pending, Running, Succeeded, Failed, or Terminating while being deleted.",
  }),
  ready: Type.Optional(Type.Boolean({ description: "Whether the Pod is Ready." })),
  restartCount: Type.Integer({ minimum: 0, description: "Container restarts, summed." }),
  podIP: Type.Optional(Type.String({ description: "The Pod's IP, once it has one." })),
  reason: Type.Optional(Type.String({
    description: "Why the Pod cannot become Ready (the kubelet's, the scheduler's or the " +
      "Pod's own reason, e.g. ImagePullBackOff, Unschedulable, Evicted); absent while it can.",
  })),
  message: Type.Optional(Type.String({ description: "The message that goes with reason." })),
  containers: Type.Optional(Type.Array(ContainerStatusEntry, {
    description: "Each container's state as the kubelet reports it.",
  })),
});

/** AppService status (written only through the status subresource). */
export const AppServiceStatus = Type.Object({
  ready: Type.Optional(Type.Boolean({
    description: "Every desired Pod is Ready and made from the current spec (the Ready condition).",
  })),
  replicas: Type.Optional(Type.Integer({
    minimum: 0,
    description:
      "Pods that exist and are not terminating (the scale subresource's status replicas).",
  })),
  selector: Type.Optional(Type.String({
    description: "Label selector of the Pods, as a string (the scale subresource's selector).",
  })),
  readyReplicas: Type.Optional(Type.Integer({
    minimum: 0,
    description: "Pods that are Ready, of any spec, not terminating (during a rollout, old ones " +
      "too).",
  })),
  updatedReplicas: Type.Optional(Type.Integer({
    minimum: 0,
    description: "Pods made from the current spec, not terminating (Ready or not).",
  })),
  availableReplicas: Type.Optional(Type.Integer({
    minimum: 0,
    description: "Pods of any spec that are available: Ready for minReadySeconds and not " +
      "terminating (the Available condition compares it with replicas - maxUnavailable).",
  })),
  replicasSummary: Type.Optional(Type.String({
    description: "readyReplicas/replicas, for the Replicas column of kubectl get.",
  })),
  observedGeneration: Type.Optional(Type.Integer({
    minimum: 0,
    description: "The metadata.generation this status was computed from.",
  })),
  lastReconciliation: Type.Optional(Type.String({
    format: "date-time",
    description: "When the operator last changed this status.",
  })),
  conditions: Type.Optional(Type.Array(Condition, {
    description: "Ready, Available, Progressing and Degraded, each with reason, message and " +
      "observedGeneration.",
  })),
  podStatuses: Type.Optional(Type.Array(PodStatusEntry, {
    description: "Each Pod of the AppService: phase, readiness, restarts, IP, containers, and " +
      "why it is stuck.",
  })),
}, { description: "What the operator observed, written by it only (the status subresource)." });

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
    `spec${e.path.replace(/\/([0-9]+)(?=\/|$)/g, "[$1]").replaceAll("/", ".")}: ${e.message}`
  );
  // CEL rules (their twins) and list-map keys, which TypeBox does not know.
  checkRules(AppServiceSpec, withDefaults, "spec", errors);
  return { spec: withDefaults, errors: [...new Set(errors)] };
}

/**
 * Turns a TypeBox schema into a structural OpenAPI v3 schema as apiextensions.k8s.io/v1 wants it:
 * symbol keys dropped, `patternProperties` of a Record become `additionalProperties`, and a union
 * of string literals becomes `type: string` with `enum` (the apiserver has no `const`; a single
 * literal becomes a one-value `enum`).
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
    if (typeof out.const === "string") {
      out.enum = [out.const];
      delete out.const;
    }
    if (
      Array.isArray(out.anyOf) && out.anyOf.length > 0 &&
      // deno-lint-ignore no-explicit-any
      out.anyOf.every((a: any) => a.enum?.length === 1 && typeof a.enum[0] === "string")
    ) {
      // deno-lint-ignore no-explicit-any
      out.enum = out.anyOf.map((a: any) => a.enum[0]);
      out.type = "string";
      delete out.anyOf;
    }
    return out;
  };
  return walk(JSON.parse(JSON.stringify(schema)));
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
          // As `kubectl get deployment` counts: Pods at the current spec, and available Pods.
          { name: "Up-to-date", type: "integer", jsonPath: ".status.updatedReplicas" },
          { name: "Available", type: "integer", jsonPath: ".status.availableReplicas" },
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
            properties: {
              apiVersion: { type: "string" },
              kind: { type: "string" },
              // The name becomes the Service's name (a DNS-1035 label) and a label value (63
              // characters at most), so a name that cannot be used is refused at once. (253:
              // the longest name the apiserver accepts anyway; it bounds the rule's CEL cost.)
              metadata: {
                type: "object",
                properties: {
                  name: { type: "string", maxLength: 253, "x-kubernetes-validations": [NAME_RULE] },
                },
              },
              spec: toStructural(AppServiceSpec),
              status: toStructural(AppServiceStatus),
            },
          },
        },
      }],
    },
  };
}
