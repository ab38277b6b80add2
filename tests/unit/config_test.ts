import { assert, assertEquals, assertRejects } from "../assert.ts";
import { inClusterConfig, loadClusterConfig } from "../../lib/kube/config.ts";
import { CredentialProvider } from "../../lib/kube/credentials.ts";
import { ConfigError, networkErrorReason } from "../../lib/kube/errors.ts";

// A self-signed pair made for these tests only (tests/fixtures); it trusts and signs nothing.
const CERT = Deno.readTextFileSync(new URL("../fixtures/test-client.crt", import.meta.url));
const KEY = Deno.readTextFileSync(new URL("../fixtures/test-client.key", import.meta.url));
const b64 = (s: string) => btoa(s);

function kubeconfig(o: {
  server?: string;
  cluster?: Record<string, unknown>;
  user?: Record<string, unknown>;
  current?: string;
  ns?: string;
}) {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    "current-context": o.current ?? "c",
    clusters: [{
      name: "k",
      cluster: {
        server: o.server ?? "https://127.0.0.1:6443",
        "certificate-authority-data": b64(CERT),
        ...o.cluster,
      },
    }],
    users: [{ name: "u", user: o.user ?? { token: "t0k" } }],
    contexts: [{ name: "c", context: { cluster: "k", user: "u", namespace: o.ns } }],
  });
}

async function withDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "kcfg-" });
  try {
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const noEnv = () => undefined;

Deno.test("config: token, client certificate data, files relative to the kubeconfig", async () => {
  await withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/a.yaml`, kubeconfig({ ns: "team" }));
    const a = loadClusterConfig({ kubeconfig: `${dir}/a.yaml`, env: noEnv });
    assertEquals(a.auth, { kind: "token", token: "t0k" });
    assertEquals(a.namespace, "team");
    assertEquals(a.caPem, CERT);
    await Deno.writeTextFile(`${dir}/c.crt`, CERT);
    await Deno.writeTextFile(`${dir}/c.key`, KEY);
    await Deno.writeTextFile(
      `${dir}/b.yaml`,
      kubeconfig({ user: { "client-certificate": "c.crt", "client-key": "c.key" } }),
    );
    const b = loadClusterConfig({ kubeconfig: `${dir}/b.yaml`, env: noEnv });
    assertEquals(b.auth, {
      kind: "clientCertificate",
      certPem: CERT,
      keyPem: KEY,
      certFile: `${dir}/c.crt`,
      keyFile: `${dir}/c.key`,
    });
    assertEquals(b.namespace, "default");
  });
});

Deno.test("config: KUBECONFIG files merge — first definition and first current-context win", async () => {
  await withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/1.yaml`, kubeconfig({ server: "https://127.0.0.1:1111" }));
    await Deno.writeTextFile(
      `${dir}/2.yaml`,
      JSON.stringify({
        "current-context": "other",
        clusters: [{ name: "k", cluster: { server: "https://127.0.0.1:2222" } }, {
          name: "k2",
          cluster: { server: "https://127.0.0.1:3333" },
        }],
        users: [{ name: "u2", user: { token: "second" } }],
        contexts: [{ name: "other", context: { cluster: "k2", user: "u2" } }],
      }),
    );
    const env = (n: string) =>
      n === "KUBECONFIG" ? `${dir}/1.yaml:${dir}/missing:${dir}/2.yaml` : undefined;
    const c = loadClusterConfig({ env });
    assertEquals(c.server, "https://127.0.0.1:1111"); // current-context "c" from the first file
    const o = loadClusterConfig({ env, context: "other" });
    assertEquals(o.server, "https://127.0.0.1:3333");
    assertEquals(o.auth, { kind: "token", token: "second" });
  });
});

Deno.test("config: every unusable input is a one-line ConfigError naming the problem", async () => {
  await withDir(async (dir) => {
    const cases: [string, string, RegExp][] = [
      ["yaml", "clusters: [\n  - name: x\n   bad", /not valid YAML: .*column \d+$/],
      ["notkubeconfig", ":: not yaml [", /not a kubeconfig \(none of apiVersion, kind/],
      ["list", "clusters: 3\n", /clusters must be a list/],
      ["nocontext", kubeconfig({ current: "nope" }), /no context "nope"/],
      [
        "insecure",
        kubeconfig({ cluster: { "insecure-skip-tls-verify": true } }),
        /insecure-skip-tls-verify/,
      ],
      [
        "authprovider",
        kubeconfig({ user: { "auth-provider": { name: "gcp" } } }),
        /auth-provider "gcp"/,
      ],
      ["anonymous", kubeconfig({ user: {} }), /no credential .* anonymous/],
      ["basic", kubeconfig({ user: { username: "a", password: "b" } }), /basic auth/],
      [
        "certnokey",
        kubeconfig({ user: { "client-certificate-data": b64(CERT) } }),
        /no client key/,
      ],
      [
        "badb64",
        kubeconfig({ user: { "client-certificate-data": "%%%", "client-key-data": b64(KEY) } }),
        /not valid base64/,
      ],
      ["noserver", kubeconfig({ server: "" }), /has no server/],
      ["badserver", kubeconfig({ server: "ftp://x" }), /must be https/],
      [
        "missingfile",
        kubeconfig({ user: { tokenFile: "nope.txt" } }),
        /cannot read .*tokenFile.*nope.txt/,
      ],
      [
        "execver",
        kubeconfig({ user: { exec: { command: "x", apiVersion: "v0" } } }),
        /exec apiVersion/,
      ],
    ];
    for (const [name, text, re] of cases) {
      await Deno.writeTextFile(`${dir}/${name}.yaml`, text);
      const err = await assertRejects(
        () => loadClusterConfig({ kubeconfig: `${dir}/${name}.yaml`, env: noEnv }),
        re,
      );
      assert(err instanceof ConfigError, `${name}: ${err}`);
      assert(!err.message.includes("\n"), `${name}: message has several lines`);
    }
    await assertRejects(
      () => loadClusterConfig({ kubeconfig: `${dir}/absent.yaml`, env: noEnv }),
      /no such file/,
    );
    await assertRejects(() => loadClusterConfig({ env: noEnv }), /no kubeconfig/);
  });
});

Deno.test("config: in-cluster from a service account folder; token file re-read after a minute", async () => {
  await withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/token`, "first\n");
    await Deno.writeTextFile(`${dir}/ca.crt`, CERT);
    await Deno.writeTextFile(`${dir}/namespace`, "ops");
    const env = (n: string) =>
      ({ KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: "6443" })[n];
    const c = inClusterConfig(env, dir);
    assertEquals(c.server, "https://127.0.0.1:6443");
    assertEquals(c.namespace, "ops");
    let now = 0;
    const creds = new CredentialProvider(c, () => now);
    assertEquals((await creds.get()).authorization, "Bearer first");
    await Deno.writeTextFile(`${dir}/token`, "second\n");
    now += 30_000;
    assertEquals((await creds.get()).authorization, "Bearer first");
    now += 30_000;
    assertEquals((await creds.get()).authorization, "Bearer second");
    await Deno.writeTextFile(`${dir}/token`, "third\n");
    creds.invalidate(); // as after a 401
    assertEquals((await creds.get()).authorization, "Bearer third");
    creds.close();
    const v6 = inClusterConfig(
      (n) => ({ KUBERNETES_SERVICE_HOST: "::1", KUBERNETES_SERVICE_PORT: "443" })[n],
      dir,
    );
    assertEquals(v6.server, "https://[::1]:443");
    await assertRejects(() => inClusterConfig(noEnv, dir), /KUBERNETES_SERVICE_HOST/);
  });
});

Deno.test("config: exec plugin credential cached until expiry, re-run after invalidate", async () => {
  await withDir(async (dir) => {
    const script = `${dir}/plugin.sh`;
    await Deno.writeTextFile(
      script,
      `#!/bin/sh
n=$(cat "${dir}/count" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "${dir}/count"
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok-'$n'"}}'
`,
    );
    await Deno.chmod(script, 0o755);
    await Deno.writeTextFile(
      `${dir}/k.yaml`,
      kubeconfig({
        user: { exec: { apiVersion: "client.authentication.k8s.io/v1", command: "./plugin.sh" } },
      }),
    );
    const c = loadClusterConfig({ kubeconfig: `${dir}/k.yaml`, env: noEnv });
    const creds = new CredentialProvider(c);
    assertEquals((await creds.get()).authorization, "Bearer tok-1");
    assertEquals((await creds.get()).authorization, "Bearer tok-1");
    creds.invalidate();
    assertEquals((await creds.get()).authorization, "Bearer tok-2");
    creds.close();
    await Deno.writeTextFile(script, "#!/bin/sh\necho boom >&2\nexit 3\n");
    const bad = new CredentialProvider(c);
    await assertRejects(() => bad.get(), /exited with code 3: boom/);
    bad.close();
  });
});

Deno.test("networkErrorReason: the cause of a failed fetch, not a bare 'fetch failed'", async () => {
  // A loopback port nobody listens on: take a free one and close it.
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  let thrown: unknown;
  try {
    await fetch(`https://127.0.0.1:${port}/`);
  } catch (err) {
    thrown = err;
  }
  const wrapped = new Error("GET /version: cannot reach 127.0.0.1", { cause: thrown });
  for (const err of [thrown, wrapped]) {
    const why = networkErrorReason(err);
    assert(/connect/i.test(why) && /refused/i.test(why), why);
    assert(!why.startsWith("error sending request"), why);
    assert(!why.includes("\n"), why);
  }
  assertEquals(networkErrorReason(new Error("plain")), "plain");
  assertEquals(networkErrorReason("text"), "text");
});
