/**
 * A self-signed X.509 serving certificate made in process with Web Crypto (ECDSA P-256,
 * SHA-256), for `/metrics` over HTTPS when no certificate is given — what controller-runtime's
 * metrics server does with `certutil.GenerateSelfSignedCertKeyWithFixtures("localhost",
 * [127.0.0.1])` when its CertDir holds no tls.crt/tls.key. Nothing is written to disk (the
 * container's root filesystem is read-only).
 *
 * No dependency: Web Crypto makes the key pair and the signature, and exports the public key
 * already DER-encoded (SubjectPublicKeyInfo) and the private key as PKCS #8; what is left is a
 * small DER writer for the certificate around them (RFC 5280 §4.1) — about a hundred lines, where
 * a library (`@peculiar/x509`, `node-forge`) would add 6–10 packages to the binary.
 *
 * @module
 */

/** How long the self-signed certificate is valid: one year, as client-go's certutil makes it. */
export const SELF_SIGNED_VALIDITY_MS = 365 * 24 * 3_600_000;
/** The certificate is valid from this long before it is made (certutil: one hour, clock skew). */
export const SELF_SIGNED_BACKDATE_MS = 3_600_000;

/** A certificate and its private key, PEM-encoded, as `Deno.serve`'s `cert` and `key` take them. */
export interface CertificatePem {
  /** `-----BEGIN CERTIFICATE-----` ... */
  certPem: string;
  /** `-----BEGIN PRIVATE KEY-----` (PKCS #8) ... */
  keyPem: string;
  /** End of validity (ms since the epoch). */
  notAfterMs: number;
}

/** Options of {@link selfSignedCertificate}. */
export interface SelfSignedOptions {
  /** Subject and issuer common name; default `localhost`. */
  commonName?: string;
  /** DNS names of subjectAltName; default `["localhost"]`. */
  dnsNames?: string[];
  /** IPv4/IPv6 addresses of subjectAltName; default `["127.0.0.1", "::1"]`. */
  ipAddresses?: string[];
  /** Now (ms since the epoch); default `Date.now()`. */
  nowMs?: number;
  /** Validity from `nowMs` (ms); default {@link SELF_SIGNED_VALIDITY_MS}. */
  validityMs?: number;
}

// DER (ITU-T X.690) tags used here.
const BOOLEAN = 0x01;
const INTEGER = 0x02;
const BIT_STRING = 0x03;
const OCTET_STRING = 0x04;
const OID = 0x06;
const UTF8_STRING = 0x0c;
const UTC_TIME = 0x17;
const GENERALIZED_TIME = 0x18;
const SEQUENCE = 0x30;
const SET = 0x31;

function concat(parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** One DER element: tag, definite length, content. */
function tlv(tag: number, ...content: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const body = concat(content);
  const n = body.length;
  const len = n < 0x80 ? [n] : n < 0x100 ? [0x81, n] : n < 0x10000 ? [0x82, n >> 8, n & 0xff] : [
    0x83,
    n >> 16,
    (n >> 8) & 0xff,
    n & 0xff,
  ];
  return concat([new Uint8Array([tag, ...len]), body]);
}

/** An unsigned big-endian integer as a DER INTEGER (minimal, positive). */
function uint(bytes: Uint8Array): Uint8Array {
  let i = 0;
  while (i < bytes.length - 1 && bytes[i] === 0) i++;
  const v = bytes.slice(i);
  return tlv(INTEGER, v[0] & 0x80 ? concat([new Uint8Array([0]), v]) : v);
}

function oid(dotted: string): Uint8Array {
  const arcs = dotted.split(".").map(Number);
  const out = [40 * arcs[0] + arcs[1]];
  for (const arc of arcs.slice(2)) {
    const b = [arc & 0x7f];
    for (let v = arc >>> 7; v > 0; v >>>= 7) b.unshift((v & 0x7f) | 0x80);
    out.push(...b);
  }
  return tlv(OID, new Uint8Array(out));
}

/** UTCTime until 2049, GeneralizedTime from 2050 (RFC 5280 §4.1.2.5). */
function time(ms: number): Uint8Array {
  const iso = new Date(Math.floor(ms / 1000) * 1000).toISOString(); // 2025-01-02T03:04:05.000Z
  const digits = iso.slice(0, 19).replace(/[-T:]/g, "") + "Z"; // 20250102030405Z
  const year = Number(iso.slice(0, 4));
  return year < 2050
    ? tlv(UTC_TIME, new TextEncoder().encode(digits.slice(2)))
    : tlv(GENERALIZED_TIME, new TextEncoder().encode(digits));
}

function name(commonName: string): Uint8Array {
  const cn = tlv(SEQUENCE, oid("2.5.4.3"), tlv(UTF8_STRING, new TextEncoder().encode(commonName)));
  return tlv(SEQUENCE, tlv(SET, cn));
}

function extension(id: string, critical: boolean, value: Uint8Array): Uint8Array {
  const flag = critical ? [tlv(BOOLEAN, new Uint8Array([0xff]))] : [];
  return tlv(SEQUENCE, oid(id), ...flag, tlv(OCTET_STRING, value));
}

/** The bytes of an IPv4 (4) or IPv6 (16) address. @throws Error for anything else */
export function ipBytes(ip: string): Uint8Array {
  if (/^\d{1,3}(\.\d{1,3}){3}$/.test(ip)) {
    const parts = ip.split(".").map(Number);
    if (parts.some((p) => p > 255)) throw new Error(`not an IP address: ${ip}`);
    return new Uint8Array(parts);
  }
  const halves = ip.split("::");
  if (!ip.includes(":") || halves.length > 2) throw new Error(`not an IP address: ${ip}`);
  const [head, tail] = halves;
  const groups = (s?: string) => (s ? s.split(":") : []).map((g) => parseInt(g, 16));
  const h = groups(head);
  const t = tail === undefined ? [] : groups(tail);
  const zeros = tail === undefined ? 0 : 8 - h.length - t.length;
  const all = [...h, ...new Array(zeros).fill(0), ...t];
  if (all.length !== 8 || all.some((g) => !(g >= 0 && g <= 0xffff))) {
    throw new Error(`not an IP address: ${ip}`);
  }
  return new Uint8Array(all.flatMap((g) => [g >> 8, g & 0xff]));
}

/** An ECDSA signature from Web Crypto (r ‖ s, IEEE P1363) as DER Ecdsa-Sig-Value (RFC 5480). */
function ecdsaDer(raw: Uint8Array): Uint8Array {
  const half = raw.length / 2;
  return tlv(SEQUENCE, uint(raw.slice(0, half)), uint(raw.slice(half)));
}

function pem(label: string, der: Uint8Array): string {
  let b64 = "";
  for (let i = 0; i < der.length; i += 0x8000) {
    b64 += String.fromCharCode(...der.subarray(i, i + 0x8000));
  }
  const lines = btoa(b64).match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

/**
 * A new self-signed serving certificate (X.509 v3, ECDSA P-256 with SHA-256): subject = issuer =
 * `CN=<commonName>`, a random 128-bit serial, valid from an hour before `nowMs` for `validityMs`,
 * subjectAltName of `dnsNames` and `ipAddresses`, basicConstraints CA:false and keyUsage
 * digitalSignature (both critical), extKeyUsage serverAuth.
 * @throws Error for a malformed IP address
 */
export async function selfSignedCertificate(o: SelfSignedOptions = {}): Promise<CertificatePem> {
  const now = o.nowMs ?? Date.now();
  const notAfterMs = now + (o.validityMs ?? SELF_SIGNED_VALIDITY_MS);
  const keys = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
    "sign",
    "verify",
  ]) as CryptoKeyPair;
  const spki = new Uint8Array(await crypto.subtle.exportKey("spki", keys.publicKey));
  const pkcs8 = new Uint8Array(await crypto.subtle.exportKey("pkcs8", keys.privateKey));
  const serial = crypto.getRandomValues(new Uint8Array(16));
  serial[0] &= 0x7f; // positive
  serial[0] |= 0x01; // and never shortened below 16 bytes
  const ecdsaWithSha256 = tlv(SEQUENCE, oid("1.2.840.10045.4.3.2"));
  const issuer = name(o.commonName ?? "localhost");
  const altNames = concat([
    ...(o.dnsNames ?? ["localhost"]).map((d) => tlv(0x82, new TextEncoder().encode(d))),
    ...(o.ipAddresses ?? ["127.0.0.1", "::1"]).map((ip) => tlv(0x87, ipBytes(ip))),
  ]);
  const extensions = tlv(
    SEQUENCE,
    extension("2.5.29.19", true, tlv(SEQUENCE)), // basicConstraints: not a CA
    extension("2.5.29.15", true, tlv(BIT_STRING, new Uint8Array([7, 0x80]))), // digitalSignature
    extension("2.5.29.37", false, tlv(SEQUENCE, oid("1.3.6.1.5.5.7.3.1"))), // serverAuth
    extension("2.5.29.17", false, tlv(SEQUENCE, altNames)), // subjectAltName
  );
  const tbs = tlv(
    SEQUENCE,
    tlv(0xa0, tlv(INTEGER, new Uint8Array([2]))), // [0] version v3
    uint(serial),
    ecdsaWithSha256,
    issuer,
    tlv(SEQUENCE, time(now - SELF_SIGNED_BACKDATE_MS), time(notAfterMs)),
    issuer, // self-signed: subject = issuer
    spki,
    tlv(0xa3, extensions), // [3] extensions
  );
  const sig = new Uint8Array(
    await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, keys.privateKey, tbs),
  );
  const cert = tlv(
    SEQUENCE,
    tbs,
    ecdsaWithSha256,
    tlv(BIT_STRING, new Uint8Array([0]), ecdsaDer(sig)),
  );
  return { certPem: pem("CERTIFICATE", cert), keyPem: pem("PRIVATE KEY", pkcs8), notAfterMs };
}
