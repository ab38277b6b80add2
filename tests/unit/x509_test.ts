/**
 * The self-signed serving certificate made in process (lib/runtime/x509.ts): node:crypto parses it
 * (subject, subjectAltName, validity, not a CA, self-signature, matching key), and a TLS client
 * that trusts it completes a handshake with `Deno.serve` on 127.0.0.1 and localhost.
 */
import { createPrivateKey, X509Certificate } from "node:crypto";
import { assert, assertEquals } from "../assert.ts";
import {
  ipBytes,
  SELF_SIGNED_BACKDATE_MS,
  SELF_SIGNED_VALIDITY_MS,
  selfSignedCertificate,
} from "../../lib/runtime/x509.ts";

Deno.test("self-signed certificate: names, validity, not a CA, signature and key", async () => {
  const now = Date.parse("2030-06-01T12:00:00Z");
  const c = await selfSignedCertificate({ nowMs: now });
  const x = new X509Certificate(c.certPem);
  assertEquals(x.subject, "CN=localhost");
  assertEquals(x.issuer, "CN=localhost");
  assertEquals(x.subjectAltName, "DNS:localhost, IP Address:127.0.0.1, IP Address:::1");
  assertEquals(Date.parse(x.validFrom), now - SELF_SIGNED_BACKDATE_MS);
  assertEquals(Date.parse(x.validTo), now + SELF_SIGNED_VALIDITY_MS);
  assertEquals(c.notAfterMs, now + SELF_SIGNED_VALIDITY_MS);
  assertEquals(x.ca, false);
  assert(x.verify(x.publicKey), "self-signature verifies");
  assert(x.checkPrivateKey(createPrivateKey(c.keyPem)), "the key is the certificate's");
  assertEquals(x.publicKey.asymmetricKeyType, "ec");
  assertEquals(x.keyUsage, ["DigitalSignature"]);
  // Two certificates never share a serial number or key.
  const d = await selfSignedCertificate({ nowMs: now });
  assert(new X509Certificate(d.certPem).serialNumber !== x.serialNumber);
});

Deno.test("self-signed certificate: GeneralizedTime from 2050, other names", async () => {
  const now = Date.parse("2049-12-01T00:00:00Z");
  const c = await selfSignedCertificate({
    nowMs: now,
    commonName: "appservice-operator",
    dnsNames: ["metrics.example", "localhost"],
    ipAddresses: ["10.1.2.3", "fd00::1:2"],
  });
  const x = new X509Certificate(c.certPem);
  assertEquals(x.subject, "CN=appservice-operator");
  assertEquals(
    x.subjectAltName,
    "DNS:metrics.example, DNS:localhost, IP Address:10.1.2.3, IP Address:fd00::1:2",
  );
  assertEquals(new Date(x.validTo).getUTCFullYear(), 2050);
});

Deno.test("ipBytes: IPv4, IPv6 with ::, errors", () => {
  assertEquals([...ipBytes("127.0.0.1")], [127, 0, 0, 1]);
  assertEquals([...ipBytes("::1")], [...new Array(15).fill(0), 1]);
  assertEquals([...ipBytes("fe80::2:3")].slice(0, 2), [0xfe, 0x80]);
  assertEquals([...ipBytes("1:2:3:4:5:6:7:8")].length, 16);
  for (const bad of ["1.2.3.256", "localhost", "1::2::3", "1:2:3"]) {
    let threw = false;
    try {
      ipBytes(bad);
    } catch {
      threw = true;
    }
    assert(threw, bad);
  }
});

Deno.test("self-signed certificate: a TLS client trusting it talks to Deno.serve", async () => {
  const c = await selfSignedCertificate();
  const ac = new AbortController();
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    cert: c.certPem,
    key: c.keyPem,
    signal: ac.signal,
    onListen: () => {},
  }, () => new Response("ok"));
  const client = Deno.createHttpClient({ caCerts: [c.certPem] });
  try {
    for (const host of ["127.0.0.1", "localhost"]) {
      const r = await fetch(`https://${host}:${server.addr.port}/`, { client });
      assertEquals([r.status, await r.text()], [200, "ok"], host);
    }
    // Without trusting it: refused (the certificate is not from a known CA).
    const plain = Deno.createHttpClient({});
    try {
      await fetch(`https://127.0.0.1:${server.addr.port}/`, { client: plain }).then(
        () => assert(false, "an untrusted certificate was accepted"),
        (err) => assert(err instanceof TypeError, String(err)),
      );
    } finally {
      plain.close();
    }
  } finally {
    client.close();
    ac.abort();
    await server.finished;
  }
});
