/**
 * Credential files read again when they change ({@link CredentialProvider}), against loopback
 * TLS servers whose certificates come from two CAs: the CA file (re-read after a failure and at
 * least every minute, injected clock), the client certificate and key files, the token file; a
 * file that cannot be used is not adopted; the old HTTP client is closed once no request is sent
 * through it.
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import type { ClusterConfig } from "../../lib/kube/config.ts";
import {
  CREDENTIAL_FILE_CHECK_MS,
  CredentialProvider,
  type TlsChange,
} from "../../lib/kube/credentials.ts";
import { issueCertificate } from "../cluster/cluster.ts";

/** Two CAs, a serving certificate from each, and a client certificate from the first. */
async function pki(dir: string) {
  const out: { caPem: string; cert: string; key: string }[] = [];
  for (const n of [1, 2]) {
    const ca = await issueCertificate({
      dir,
      stem: `ca${n}`,
      subject: `/CN=unit-ca${n}`,
      kind: "ca",
    });
    const s = await issueCertificate({
      dir,
      stem: `srv${n}`,
      subject: "/CN=srv",
      kind: "server",
      ca,
    });
    out.push({
      caPem: await Deno.readTextFile(ca.certFile),
      cert: await Deno.readTextFile(s.certFile),
      key: await Deno.readTextFile(s.keyFile),
    });
  }
  const client = await issueCertificate({
    dir,
    stem: "client",
    subject: "/CN=someone",
    kind: "client",
    ca: { certFile: `${dir}/ca1.crt`, keyFile: `${dir}/ca1.key` },
  });
  return {
    cas: out,
    clientCert: await Deno.readTextFile(client.certFile),
    clientKey: await Deno.readTextFile(client.keyFile),
  };
}

function tlsServer(cert: string, key: string) {
  const s = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert, key, onListen() {} },
    () => new Response("ok"),
  );
  return { url: `https://127.0.0.1:${s.addr.port}/`, close: () => s.shutdown() };
}

async function reaches(client: Deno.HttpClient, url: string): Promise<string> {
  try {
    const r = await fetch(url, { client, signal: AbortSignal.timeout(5_000) });
    return await r.text();
  } catch (err) {
    return String((err as Error).name);
  }
}

Deno.test("credentials: the CA file is re-read after a failure and every minute; unusable content is not adopted; old clients close once unused", async () => {
  const dir = await Deno.makeTempDir({ prefix: "creds-" });
  const p = await pki(dir);
  const s1 = tlsServer(p.cas[0].cert, p.cas[0].key);
  const s2 = tlsServer(p.cas[1].cert, p.cas[1].key);
  const caFile = `${dir}/ca.crt`;
  await Deno.writeTextFile(caFile, p.cas[0].caPem);
  const config: ClusterConfig = {
    server: "https://127.0.0.1:1",
    caPem: p.cas[0].caPem,
    caFile,
    auth: { kind: "token", token: "t" },
    namespace: "default",
    source: "test",
  };
  let now = 1_000_000;
  const creds = new CredentialProvider(config, () => now);
  const changes: TlsChange[] = [];
  creds.onTlsChange((c) => changes.push(c));
  try {
    const c1 = await creds.get();
    assertEquals(await reaches(c1.httpClient, s1.url), "ok");
    assertEquals(await reaches(c1.httpClient, s2.url), "TypeError"); // UnknownIssuer
    // A request holds the client while it is sent: not closed by a rotation until released.
    await Deno.writeTextFile(caFile, p.cas[1].caPem);
    creds.recheckAfterFailure();
    const c2 = await creds.get();
    assert(c2.httpClient !== c1.httpClient, "no new client after the CA file changed");
    assertEquals(changes, [{ changed: ["certificate-authority"] }]);
    assertEquals(await reaches(c2.httpClient, s2.url), "ok");
    assertEquals(await reaches(c1.httpClient, s1.url), "ok", "closed while in use");
    c1.release();
    assertEquals(await reaches(c1.httpClient, s1.url), "BadResource", "not closed once unused");
    c2.release();

    // Unchanged or unusable content: the same client goes on.
    await Deno.writeTextFile(caFile, "not a certificate\n");
    now += CREDENTIAL_FILE_CHECK_MS;
    const c3 = await creds.get();
    assert(c3.httpClient === c2.httpClient, "adopted an unusable CA file");
    assert(/not a PEM certificate/.test(creds.lastFileError ?? ""), creds.lastFileError);
    c3.release();

    // A bundle of both CAs, picked up by the periodic check (no failure needed).
    await Deno.writeTextFile(caFile, p.cas[0].caPem + p.cas[1].caPem);
    now += CREDENTIAL_FILE_CHECK_MS - 1;
    const c4 = await creds.get();
    assert(c4.httpClient === c2.httpClient, "checked before a minute");
    c4.release();
    now += 1;
    const c5 = await creds.get();
    assert(c5.httpClient !== c2.httpClient);
    assertEquals(await reaches(c5.httpClient, s1.url), "ok");
    assertEquals(await reaches(c5.httpClient, s2.url), "ok");
    assertEquals(creds.lastFileError, undefined);
    c5.release();
    assertEquals(changes.length, 2);
  } finally {
    creds.close();
    await s1.close();
    await s2.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("credentials: client certificate and key files and the token file are re-read when they change", async () => {
  const dir = await Deno.makeTempDir({ prefix: "creds-" });
  const p = await pki(dir);
  try {
    const certFile = `${dir}/c.crt`;
    const keyFile = `${dir}/c.key`;
    await Deno.writeTextFile(certFile, p.cas[0].cert);
    await Deno.writeTextFile(keyFile, p.cas[0].key);
    let now = 0;
    const certs = new CredentialProvider({
      server: "https://127.0.0.1:1",
      auth: {
        kind: "clientCertificate",
        certPem: p.cas[0].cert,
        keyPem: p.cas[0].key,
        certFile,
        keyFile,
      },
      namespace: "default",
      source: "test",
    }, () => now);
    const changes: TlsChange[] = [];
    certs.onTlsChange((c) => changes.push(c));
    try {
      (await certs.get()).release();
      assertEquals(await certs.checkFiles(), false);
      // Half-way through a rotation the key file is not a key yet: nothing adopted.
      await Deno.writeTextFile(certFile, p.clientCert);
      await Deno.writeTextFile(keyFile, "");
      assertEquals(await certs.checkFiles(), false);
      assert(certs.lastFileError, "no error for an empty key file");
      await Deno.writeTextFile(keyFile, p.clientKey);
      assertEquals(await certs.checkFiles(), true);
      assertEquals(changes, [{ changed: ["client-certificate", "client-key"] }]);
      // After a 401 the files are checked before the next request.
      await Deno.writeTextFile(certFile, p.cas[1].cert);
      await Deno.writeTextFile(keyFile, p.cas[1].key);
      certs.invalidate();
      (await certs.get()).release();
      assertEquals(changes.length, 2);
    } finally {
      certs.close();
    }

    const tokenFile = `${dir}/token`;
    await Deno.writeTextFile(tokenFile, "one\n");
    const tokens = new CredentialProvider({
      server: "https://127.0.0.1:1",
      auth: { kind: "tokenFile", path: tokenFile },
      namespace: "default",
      source: "test",
    }, () => now);
    try {
      const a = await tokens.get();
      assertEquals(a.authorization, "Bearer one");
      a.release();
      await Deno.writeTextFile(tokenFile, "two\n");
      now += CREDENTIAL_FILE_CHECK_MS;
      const b = await tokens.get();
      assertEquals(b.authorization, "Bearer two");
      b.release();
      await Deno.remove(tokenFile);
      now += CREDENTIAL_FILE_CHECK_MS;
      // A token file that is gone for a moment keeps the last token for the file check, and a
      // refresh that cannot read it fails (no anonymous request).
      await assertRejects(() => tokens.get(), /cannot read token file/);
    } finally {
      tokens.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
