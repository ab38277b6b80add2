/**
 * Certificates of the local control plane, made with the openssl CLI.
 * @module
 */

import { join } from "node:path";
import { CERT_VALIDITY_DAYS } from "./config.ts";

const OPENSSL_CONFIG = `# written by lib/testing/pki.ts
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,\
DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:::1,IP:10.0.0.1
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
`;

/** Client certificates: file stem and subject. */
export const CLIENT_CERTS: ReadonlyArray<readonly [string, string]> = [
  ["admin", "/O=system:masters/CN=admin"],
  ["kube-controller-manager", "/CN=system:kube-controller-manager"],
  ["kube-scheduler", "/CN=system:kube-scheduler"],
  ["kwok", "/O=system:masters/CN=kwok"],
];

/**
 * CA, API server serving certificate, client certificates (ECDSA P-256) and the RSA
 * ServiceAccount key pair, all made with the openssl CLI into `pki`.
 */
export async function makePki(pki: string): Promise<void> {
  const saKey = join(pki, "sa.key");
  const serviceAccountKeys = (async () => {
    await openssl([
      "genpkey",
      "-algorithm",
      "RSA",
      "-pkeyopt",
      "rsa_keygen_bits:2048",
      "-out",
      saKey,
    ]);
    await openssl(["pkey", "-in", saKey, "-pubout", "-out", join(pki, "sa.pub")]);
  })();
  const ca = await issueCertificate({
    dir: pki,
    stem: "ca",
    subject: "/CN=appservice-local-ca",
    kind: "ca",
    days: CERT_VALIDITY_DAYS * 10,
  });
  await Promise.all([
    serviceAccountKeys,
    issueCertificate({
      dir: pki,
      stem: "apiserver",
      subject: "/CN=kube-apiserver",
      kind: "server",
      ca,
    }),
    ...CLIENT_CERTS.map(([stem, subject]) =>
      issueCertificate({ dir: pki, stem, subject, kind: "client", ca })
    ),
  ]);
}

/** Options of {@linkcode issueCertificate}. */
export interface IssueCertificateOptions {
  /** Folder of the files (`<stem>.crt`, `<stem>.key`, and `openssl.cnf` when absent). */
  dir: string;
  /** File name stem: the files are `<stem>.crt` and `<stem>.key`. */
  stem: string;
  /** openssl `-subj`, e.g. `/O=system:masters/CN=admin`. */
  subject: string;
  /**
   * `ca`: self-signed CA; `server`: serving certificate for localhost, 127.0.0.1, ::1 and the
   * `kubernetes` Service names; `client`: client authentication.
   */
  kind: "ca" | "server" | "client";
  /** The issuing CA (PEM files); required unless `kind` is `ca`. */
  ca?: { certFile: string; keyFile: string };
  /** Validity in days; default {@linkcode CERT_VALIDITY_DAYS}. */
  days?: number;
}

/**
 * Makes an ECDSA P-256 key and certificate with the openssl CLI: `<dir>/<stem>.key` (mode 0600)
 * and `<dir>/<stem>.crt`. Used for the cluster's PKI and by tests that rotate certificates.
 * @throws Error when openssl is missing or fails.
 */
export async function issueCertificate(
  o: IssueCertificateOptions,
): Promise<{ certFile: string; keyFile: string }> {
  const cnf = join(o.dir, "openssl.cnf");
  try {
    await Deno.writeTextFile(cnf, OPENSSL_CONFIG, { createNew: true });
  } catch (err) {
    if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
  }
  const ecKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  const keyFile = join(o.dir, `${o.stem}.key`);
  const certFile = join(o.dir, `${o.stem}.crt`);
  const days = String(o.days ?? CERT_VALIDITY_DAYS);
  if (o.kind === "ca") {
    await openssl([
      "req",
      "-x509",
      "-new",
      "-config",
      cnf,
      "-extensions",
      "ca",
      ...ecKey,
      "-keyout",
      keyFile,
      "-out",
      certFile,
      "-days",
      days,
      "-subj",
      o.subject,
    ]);
  } else {
    if (!o.ca) throw new Error(`issueCertificate ${o.stem}: a ${o.kind} certificate needs a CA`);
    const csr = join(o.dir, `${o.stem}.csr`);
    await openssl([
      "req",
      "-new",
      "-config",
      cnf,
      ...ecKey,
      "-keyout",
      keyFile,
      "-out",
      csr,
      "-subj",
      o.subject,
    ]);
    await openssl([
      "x509",
      "-req",
      "-in",
      csr,
      "-CA",
      o.ca.certFile,
      "-CAkey",
      o.ca.keyFile,
      "-set_serial",
      randomSerial(),
      "-days",
      days,
      "-extfile",
      cnf,
      "-extensions",
      o.kind,
      "-out",
      certFile,
    ]);
    await Deno.remove(csr);
  }
  await Deno.chmod(keyFile, 0o600);
  return { certFile, keyFile };
}

function randomSerial(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[0] &= 0x7f; // positive
  return "0x" + [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function openssl(args: string[]): Promise<void> {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("openssl", { args, stdin: "null" }).output();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new Error("openssl command not found (apt-get install -y openssl)");
    }
    throw err;
  }
  if (!out.success) {
    throw new Error(
      `openssl ${args.slice(0, 2).join(" ")} failed: ${new TextDecoder().decode(out.stderr)}`,
    );
  }
}
