/**
 * Kubernetes resource quantities ("500m", "2", "1.5Gi", "1e3"), parsed exactly as far as the
 * AppService schema needs: the in-process twin of the CEL `quantity()` library the CRD's rules
 * use (k8s.io/apiserver/pkg/cel/library/quantity.go), itself `resource.ParseQuantity`
 * (k8s.io/apimachinery/pkg/api/resource/quantity.go).
 *
 * The accepted form is {@link QUANTITY_PATTERN}: the Kubernetes grammar without a minus sign and
 * with a decimal exponent of at most two digits (`1e99`). ParseQuantity also takes longer
 * exponents, but comparing `1e999999999` with another quantity makes the apiserver build a
 * billion-digit number, so the CRD refuses them before any comparison runs.
 *
 * @module
 */

/**
 * A non-negative quantity: `+`? digits with an optional fraction, then a binary suffix
 * (Ki..Ei), a decimal SI suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent of at most two
 * digits. RE2- and ECMAScript-compatible (the CRD's CEL `matches` and this module use it).
 */
export const QUANTITY_PATTERN: string =
  "^\\+?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?$";

/** Longest quantity string the schema accepts (a bound for CEL's cost estimate). */
export const QUANTITY_MAX_LENGTH = 64;

const GROUPS =
  /^\+?(?:([0-9]+)(?:\.([0-9]*))?|\.([0-9]+))(?:([KMGTPE])i|([numkMGTPE])|[eE]([+-]?[0-9]{1,2}))?$/;

const SI_EXPONENT: Record<string, number> = {
  n: -9,
  u: -6,
  m: -3,
  k: 3,
  M: 6,
  G: 9,
  T: 12,
  P: 15,
  E: 18,
};
const BINARY_POWER: Record<string, number> = { K: 10, M: 20, G: 30, T: 40, P: 50, E: 60 };

/** Nano-units in one unit: ParseQuantity rounds every value up to a multiple of 1n. */
export const NANOS_PER_UNIT = 1_000_000_000n;

/**
 * The value of a quantity in nano-units (10^-9), rounded up as ParseQuantity rounds ("1e-10" is
 * 1n), or undefined when `q` is not of the {@link QUANTITY_PATTERN} form or longer than
 * {@link QUANTITY_MAX_LENGTH}. Integers (the int branch of int-or-string) count as their decimal
 * text; other numbers are not quantities here.
 */
export function quantityNanos(q: unknown): bigint | undefined {
  let s: string;
  if (typeof q === "number") {
    if (!Number.isSafeInteger(q)) return undefined;
    s = String(q);
  } else if (typeof q === "string") {
    s = q;
  } else {
    return undefined;
  }
  if (s.length > QUANTITY_MAX_LENGTH) return undefined;
  const m = GROUPS.exec(s);
  if (!m) return undefined;
  const [, whole, frac1, frac2, binary, si, exp] = m;
  const frac = frac2 ?? frac1 ?? "";
  const digits = BigInt((whole ?? "") + frac || "0");
  let tenPower = 9 - frac.length;
  let num = digits;
  if (binary) num *= 1n << BigInt(BINARY_POWER[binary]);
  else if (si) tenPower += SI_EXPONENT[si];
  else if (exp) tenPower += Number(exp);
  if (tenPower >= 0) return num * 10n ** BigInt(tenPower);
  const den = 10n ** BigInt(-tenPower);
  return (num + den - 1n) / den; // round up (values are never negative here)
}

const INT64_MAX = (1n << 63n) - 1n;

/**
 * CEL's `quantity(q).isInteger()`: whether the parsed Quantity holds an int64 with a non-negative
 * scale (`Quantity.AsInt64`), which depends on how ParseQuantity stored it, not only on the value:
 * `2Mi`, `1.5k` and `1e3` are integers, `1.0`, `1000m` and `1.5Mi` (a fraction with a binary
 * suffix is kept as an inf.Dec) are not. Mirrors `ParseQuantity`'s fast path
 * (k8s.io/apimachinery/pkg/api/resource/quantity.go) for the {@link QUANTITY_PATTERN} form.
 */
export function quantityIsInteger(q: unknown): boolean {
  const s = typeof q === "number" && Number.isSafeInteger(q) ? String(q) : q;
  if (typeof s !== "string" || quantityNanos(s) === undefined) return false;
  if (s === "0") return true;
  const m = /^\+?0*([0-9]*)(?:\.([0-9]*))?(.*)$/.exec(s)!;
  const num = m[1] || "0";
  const denom = m[2] ?? "";
  const suffix = m[3];
  let scale: number;
  let precision: number;
  let mantissa = 1n;
  const binary = /^([KMGTPE])i$/.exec(suffix);
  if (binary) {
    const exponent = BINARY_POWER[binary[1]];
    scale = 0;
    if (denom.length === 0) {
      mantissa = 1n << BigInt(exponent);
      precision = 15 - num.length - Math.trunc(exponent * 3 / 10) - 1;
    } else {
      precision = -1;
    }
  } else {
    const e = suffix === ""
      ? 0
      : suffix in SI_EXPONENT
      ? SI_EXPONENT[suffix]
      : Number(suffix.slice(1));
    scale = e;
    precision = 18 - (num.length + denom.length);
  }
  if (precision < 0) return false; // kept as inf.Dec
  scale -= denom.length;
  if (scale < -9) return false; // inf.Dec
  const value = BigInt(num + denom) * mantissa;
  if (value > INT64_MAX) return false; // inf.Dec
  if (scale < 0) return false;
  return value * 10n ** BigInt(scale) <= INT64_MAX;
}
