/**
 * Validation rules that a JSON schema alone cannot say, written once for both places they run:
 * in the CRD as `x-kubernetes-validations` (CEL, evaluated by the apiserver; apiextensions.k8s.io/v1
 * "Validation rules") and in process, where each rule's TypeScript twin runs. {@link celRule}
 * registers the twin under the rule's CEL text; {@link checkRules} walks a TypeBox schema and a
 * value together and applies every rule and list-map key it meets, as the apiserver does.
 *
 * The twins are kept honest by tests: every rule in the generated CRD must have a twin (unit), and
 * on thousands of generated specs the apiserver and {@link checkRules} must agree (e2e property
 * test).
 *
 * @module
 */

/** One `x-kubernetes-validations` entry (apiextensions.k8s.io/v1 ValidationRule). */
export interface CelRule {
  /** CEL expression over `self` (and `oldSelf`, unused here). */
  rule: string;
  /** What the user sees after the field path, e.g. `port names must be unique`. */
  message: string;
  /** Field the error names, relative to where the rule sits (e.g. `.requests`). */
  fieldPath?: string;
  /** Error type (default FieldValueInvalid, i.e. `Invalid value`). */
  reason?:
    | "FieldValueInvalid"
    | "FieldValueForbidden"
    | "FieldValueRequired"
    | "FieldValueDuplicate";
}

/** The TypeScript twin of a CEL rule: true when `self` passes. */
// deno-lint-ignore no-explicit-any
export type RuleCheck = (self: any) => boolean;

const TWINS = new Map<string, RuleCheck>();

/**
 * A CEL rule for the CRD, with its in-process twin `check` (registered under the rule's text).
 * @throws Error when the same CEL text is registered twice with another twin.
 */
export function celRule(r: CelRule, check: RuleCheck): CelRule {
  const had = TWINS.get(r.rule);
  if (had && had !== check) throw new Error(`CEL rule registered twice: ${r.rule}`);
  TWINS.set(r.rule, check);
  return r;
}

/** The twin of a CEL rule text, or undefined when none was registered. */
export function twinOf(rule: string): RuleCheck | undefined {
  return TWINS.get(rule);
}

/** CEL string literal of `s` (JSON's escapes are CEL's). */
export function celString(s: string): string {
  return JSON.stringify(s);
}

/**
 * Applies the CEL rules (through their twins), `x-kubernetes-list-type: map|set` uniqueness,
 * `maxProperties` and `maxLength` found in `schema` (a TypeBox schema or its JSON) to `value`,
 * appending `path: message` errors. The plain JSON-schema checks (types, enums, patterns) are
 * TypeBox's; on a value of the wrong type a twin may fail where CEL would not run, which only adds
 * an error to a value refused anyway.
 * @throws Error when a rule has no registered twin (a programming error).
 */
export function checkRules(
  // deno-lint-ignore no-explicit-any
  schema: any,
  value: unknown,
  path: string,
  errors: string[],
): void {
  if (!schema || typeof schema !== "object" || value === undefined || value === null) return;
  for (const r of (schema["x-kubernetes-validations"] ?? []) as CelRule[]) {
    const twin = TWINS.get(r.rule);
    if (!twin) throw new Error(`no in-process twin for CEL rule ${r.rule}`);
    let ok: boolean;
    try {
      ok = twin(value);
    } catch {
      ok = false; // a CEL evaluation error is an error too
    }
    if (!ok) errors.push(`${path}${r.fieldPath ?? ""}: ${r.message}`);
  }
  if (typeof value === "string" && typeof schema.maxLength === "number") {
    if ([...value].length > schema.maxLength) {
      errors.push(`${path}: may not be longer than ${schema.maxLength}`);
    }
  }
  if (Array.isArray(value)) {
    const listType = schema["x-kubernetes-list-type"];
    if (listType === "map" || listType === "set") {
      const keys: string[] = schema["x-kubernetes-list-map-keys"] ?? [];
      const seen = new Set<string>();
      value.forEach((item, i) => {
        const k = listType === "set"
          ? JSON.stringify(item)
          : JSON.stringify(keys.map((key) => (item as Record<string, unknown>)?.[key]));
        if (seen.has(k)) errors.push(`${path}[${i}]: Duplicate value: ${k}`);
        seen.add(k);
      });
    }
    value.forEach((item, i) => checkRules(schema.items, item, `${path}[${i}]`, errors));
    return;
  }
  if (typeof value === "object") {
    const obj = value as Record<string, unknown>;
    if (
      typeof schema.maxProperties === "number" && Object.keys(obj).length > schema.maxProperties
    ) {
      errors.push(`${path}: must have at most ${schema.maxProperties} items`);
    }
    for (const [k, v] of Object.entries(obj)) {
      // Fields are `.name`, map entries `[key]` (as the apiserver's field paths).
      if (schema.properties?.[k]) {
        checkRules(schema.properties[k], v, `${path}.${k}`, errors);
        continue;
      }
      const values = schema.patternProperties
        ? Object.values(schema.patternProperties)[0]
        : schema.additionalProperties;
      checkRules(values, v, `${path}[${k}]`, errors);
    }
  }
}
