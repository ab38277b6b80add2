/**
 * The authentication matrix against the local control plane (S12): every credential source the
 * client supports makes a real authenticated request, and the apiserver's own answer says who it
 * saw (authentication.k8s.io/v1 SelfSubjectReview), plus one request the identity is authorized
 * for (list ConfigMaps in the test namespace, through a RoleBinding to the `view` ClusterRole).
 * A credential that cannot be used fails loudly (401 or a one-line ConfigError), never as an
 * anonymous request.
 *
 * Every address is 127.0.0.1; tokens are minted with the TokenRequest API; each test removes what
 * it created (namespace, ClusterRoleBinding, temp folder, operator process).
 */
import { stringify } from "yaml";
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { KubeClient, type KubeObject } from "../../lib/kube/client.ts";
import { type ClusterConfig, inClusterConfig, loadClusterConfig } from "../../lib/kube/config.ts";
import { CredentialProvider } from "../../lib/kube/credentials.ts";
import { ApiError, ConfigError, isNotFound, isUnauthorized } from "../../lib/kube/errors.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import {
  admin,
  cluster,
  dropNamespace,
  installCrd,
  newNamespace,
  type Operator,
  startOperator,
  waitFor,
} from "./harness.ts";
import {
  CLUSTER_ROLE_BINDINGS,
  mintToken as mintTokenWith,
  RBAC,
  ROLE_BINDINGS,
  SELF_SUBJECT_REVIEWS,
  SERVICE_ACCOUNTS,
} from "./resources.ts";

const saUser = (ns: string, name: string) => `system:serviceaccount:${ns}:${name}`;

/** Who the apiserver says the client is. */
async function whoAmI(client: KubeClient): Promise<string> {
  const r = await client.create<KubeObject & { status?: { userInfo?: { username?: string } } }>(
    SELF_SUBJECT_REVIEWS,
    { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" },
  );
  return r.status?.userInfo?.username ?? "";
}

/** whoAmI plus one authorized read: the identity is used for real work, not just recognised. */
async function assertActsAs(client: KubeClient, ns: string, user: string): Promise<void> {
  try {
    assertEquals(await whoAmI(client), user);
    const list = await client.list(CONFIGMAPS, { namespace: ns });
    assert(Array.isArray(list.items), "no items in the list answer");
  } finally {
    client.close();
  }
}

/** The same request with a bare fetch and a Credential, for CredentialProvider on its own. */
async function whoAmIWith(config: ClusterConfig, creds: CredentialProvider): Promise<string> {
  const cred = await creds.get();
  const resp = await fetch(`${config.server}/apis/authentication.k8s.io/v1/selfsubjectreviews`, {
    method: "POST",
    client: cred.httpClient,
    headers: {
      "Content-Type": "application/json",
      ...(cred.authorization ? { Authorization: cred.authorization } : {}),
    },
    body: JSON.stringify({ apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" }),
    signal: AbortSignal.timeout(15_000),
  });
  const body = await resp.json();
  if (!resp.ok) throw new Error(`SelfSubjectReview: HTTP ${resp.status} ${body?.message}`);
  return body.status?.userInfo?.username ?? "";
}

/** Mints a bound token for a ServiceAccount (TokenRequest API). */
async function mintToken(ns: string, sa: string): Promise<string> {
  return await mintTokenWith(await admin(), ns, sa, 3600);
}

/** Creates a ServiceAccount allowed to read in `ns` (RoleBinding to the `view` ClusterRole). */
async function serviceAccount(ns: string, name: string): Promise<void> {
  const c = await admin();
  await c.create(SERVICE_ACCOUNTS, {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: { name, namespace: ns },
  } as KubeObject);
  await c.create(ROLE_BINDINGS, {
    apiVersion: RBAC,
    kind: "RoleBinding",
    metadata: { name: `${name}-view`, namespace: ns },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "view" },
    subjects: [{ kind: "ServiceAccount", name, namespace: ns }],
  } as KubeObject);
}

/** A kubeconfig for the test cluster with the given user entry, written to `path`. */
async function writeKubeconfig(path: string, user: Record<string, unknown>): Promise<string> {
  const info = await cluster();
  const ca = btoa(await Deno.readTextFile(info.caCertFile));
  await Deno.writeTextFile(
    path,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      "current-context": "test",
      clusters: [{
        name: "local",
        cluster: { server: info.server, "certificate-authority-data": ca },
      }],
      users: [{ name: "u", user }],
      contexts: [{ name: "test", context: { cluster: "local", user: "u" } }],
    }),
  );
  return path;
}

/** Runs openssl; throws with its stderr on failure. */
async function openssl(args: string[]): Promise<void> {
  const out = await new Deno.Command("openssl", { args, stdout: "null", stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`openssl ${args[0]}: ${new TextDecoder().decode(out.stderr)}`);
  }
}

/** Waits for an operator's "Connected" log line and returns its properties. */
async function connectedLine(op: Operator): Promise<Record<string, unknown>> {
  return await waitFor(
    "the Connected log line",
    () => {
      const l = op.logs().find((x) => x.message === "Connected");
      return l ? (l.properties ?? l) as Record<string, unknown> : undefined;
    },
    60_000,
    100,
  );
}

/** Waits for an operator to exit by itself; returns exit code and stderr lines. */
async function exitOf(op: Operator): Promise<{ code: number; lines: string[] }> {
  const timer = setTimeout(() => op.stop("SIGKILL"), 60_000);
  const st = await op.status;
  clearTimeout(timer);
  return { code: st.code, lines: op.stderr().split("\n").filter((l) => l.trim() !== "") };
}

function assertOneLineError(r: { code: number; lines: string[] }, pattern: RegExp): void {
  assert(r.code !== 0, `exit code ${r.code}`);
  assertEquals(r.lines.length, 1, `expected one line, got:\n${r.lines.join("\n")}`);
  assert(r.lines[0].startsWith("error: "), r.lines[0]);
  assert(pattern.test(r.lines[0]), `${r.lines[0]} does not match ${pattern}`);
}

Deno.test("auth: cert, token, tokenFile, exec v1/v1beta1, in-cluster, rotation — each as itself (S12)", async (t) => {
  const info = await cluster();
  const c = await admin();
  const ns = await newNamespace("auth");
  const dir = await Deno.makeTempDir({ prefix: "auth-" });
  const port = new URL(info.server).port;
  const inClusterEnv = (n: string) =>
    ({ KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: port })[n];
  try {
    await serviceAccount(ns, "reader-a");
    await serviceAccount(ns, "reader-b");
    const tokenA = await mintToken(ns, "reader-a");
    const tokenB = await mintToken(ns, "reader-b");
    const userA = saUser(ns, "reader-a");
    const userB = saUser(ns, "reader-b");

    await t.step("client certificate (the admin kubeconfig)", async () => {
      const config = loadClusterConfig({ kubeconfig: info.kubeconfig });
      assertEquals(config.auth.kind, "clientCertificate");
      await assertActsAs(new KubeClient(config), ns, "admin");
    });

    await t.step("token in the kubeconfig", async () => {
      const path = await writeKubeconfig(`${dir}/token.yaml`, { token: tokenA });
      const config = loadClusterConfig({ kubeconfig: path });
      assertEquals(config.auth.kind, "token");
      await assertActsAs(new KubeClient(config), ns, userA);
    });

    await t.step("tokenFile, relative to the kubeconfig's folder", async () => {
      await Deno.writeTextFile(`${dir}/token-a`, tokenA + "\n");
      const path = await writeKubeconfig(`${dir}/tokenfile.yaml`, { tokenFile: "token-a" });
      const config = loadClusterConfig({ kubeconfig: path });
      assertEquals(config.auth, { kind: "tokenFile", path: `${dir}/token-a` });
      await assertActsAs(new KubeClient(config), ns, userA);
    });

    for (const version of ["v1", "v1beta1"]) {
      await t.step(`exec plugin, client.authentication.k8s.io/${version}`, async () => {
        const apiVersion = `client.authentication.k8s.io/${version}`;
        const script = `${dir}/plugin-${version}.sh`;
        // Echoes the apiVersion it was asked for (KUBERNETES_EXEC_INFO) and counts its runs.
        await Deno.writeTextFile(
          script,
          `#!/usr/bin/env bash
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=$(cat "$here/runs-${version}" 2>/dev/null || echo 0)
echo $((n + 1)) > "$here/runs-${version}"
asked=$(printf '%s' "$KUBERNETES_EXEC_INFO" | sed -n 's/.*"apiVersion":"\\([^"]*\\)".*/\\1/p')
[ "$asked" = "${apiVersion}" ] || { echo "asked for $asked" >&2; exit 4; }
printf '{"apiVersion":"%s","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}\\n' \\
  "$asked" "$(cat "$here/token-a")" "$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)"
`,
        );
        await Deno.chmod(script, 0o755);
        const path = await writeKubeconfig(`${dir}/exec-${version}.yaml`, {
          exec: { apiVersion, command: `./plugin-${version}.sh`, interactiveMode: "Never" },
        });
        const config = loadClusterConfig({ kubeconfig: path });
        assertEquals(config.auth.kind, "exec");
        await assertActsAs(new KubeClient(config), ns, userA);
        // Two requests, one run: the credential is cached until its expirationTimestamp.
        assertEquals((await Deno.readTextFile(`${dir}/runs-${version}`)).trim(), "1");
      });
    }

    await t.step(
      "in cluster: fake service account folder, KUBERNETES_SERVICE_HOST=127.0.0.1",
      async () => {
        const sa = `${dir}/sa-incluster`;
        await Deno.mkdir(sa);
        await Deno.writeTextFile(`${sa}/token`, tokenA);
        await Deno.copyFile(info.caCertFile, `${sa}/ca.crt`);
        await Deno.writeTextFile(`${sa}/namespace`, ns);
        const direct = inClusterConfig(inClusterEnv, sa);
        assertEquals(direct.server, `https://127.0.0.1:${port}`);
        assertEquals(direct.namespace, ns);
        assertEquals(direct.source, "in-cluster");
        // Through loadClusterConfig as main.ts calls it: no kubeconfig, no KUBECONFIG.
        const config = loadClusterConfig({ env: inClusterEnv, serviceAccountDir: sa });
        assertEquals(config, direct);
        await assertActsAs(new KubeClient(config), config.namespace, userA);
      },
    );

    await t.step("rotating token file: re-read after a minute (injected clock)", async () => {
      const sa = `${dir}/sa-rotate`;
      await Deno.mkdir(sa);
      await Deno.writeTextFile(`${sa}/token`, tokenA);
      await Deno.copyFile(info.caCertFile, `${sa}/ca.crt`);
      const config = inClusterConfig(inClusterEnv, sa);
      let now = 1_000_000;
      const creds = new CredentialProvider(config, () => now);
      try {
        assertEquals(await whoAmIWith(config, creds), userA);
        await Deno.writeTextFile(`${sa}/token`, tokenB); // the kubelet rotates the file
        now += 30_000;
        assertEquals(await whoAmIWith(config, creds), userA, "re-read before a minute");
        now += 31_000;
        assertEquals(await whoAmIWith(config, creds), userB);
        await Deno.writeTextFile(`${sa}/token`, tokenA);
        creds.invalidate(); // what the client does after a 401
        assertEquals(await whoAmIWith(config, creds), userA);
      } finally {
        creds.close();
      }
    });

    await t.step("rotating token file: a 401 makes the client re-read it at once", async () => {
      // A ServiceAccount of its own, deleted to revoke its tokens.
      await serviceAccount(ns, "rotated-out");
      const old = await mintToken(ns, "rotated-out");
      const sa = `${dir}/sa-401`;
      await Deno.mkdir(sa);
      await Deno.writeTextFile(`${sa}/token`, old);
      await Deno.copyFile(info.caCertFile, `${sa}/ca.crt`);
      const client = new KubeClient(inClusterConfig(inClusterEnv, sa));
      try {
        assertEquals(await whoAmI(client), saUser(ns, "rotated-out"));
        await Deno.writeTextFile(`${sa}/token`, tokenB);
        await c.delete(SERVICE_ACCOUNTS, "rotated-out", { namespace: ns });
        // The apiserver caches good tokens for a few seconds: wait until the old one is refused.
        const probe = new KubeClient({ ...client.config, auth: { kind: "token", token: old } });
        try {
          await waitFor(
            "the revoked token refused",
            async () => {
              try {
                await whoAmI(probe);
                return false;
              } catch (err) {
                if (isUnauthorized(err)) return true;
                throw err;
              }
            },
            60_000,
            500,
          );
        } finally {
          probe.close();
        }
        // Still within the minute: only the 401 can make the client read the file again.
        assertEquals(await whoAmI(client), userB);
      } finally {
        client.close();
      }
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
    await dropNamespace(ns);
  }
});

Deno.test("auth: the operator started in cluster mode connects as its ServiceAccount", async (t) => {
  const info = await cluster();
  const c = await admin();
  const ns = await newNamespace("auth-op");
  const dir = await Deno.makeTempDir({ prefix: "auth-op-" });
  const binding = `e2e-auth-operator-${ns}`;
  let op: Operator | undefined;
  try {
    await installCrd();
    await c.create(SERVICE_ACCOUNTS, {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name: "operator", namespace: ns },
    } as KubeObject);
    // Whatever the operator reads and writes; this test is about who it is, not about RBAC.
    await c.create(CLUSTER_ROLE_BINDINGS, {
      apiVersion: RBAC,
      kind: "ClusterRoleBinding",
      metadata: { name: binding },
      roleRef: {
        apiGroup: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        name: "cluster-admin",
      },
      subjects: [{ kind: "ServiceAccount", name: "operator", namespace: ns }],
    } as KubeObject);
    await Deno.writeTextFile(`${dir}/token`, await mintToken(ns, "operator"));
    await Deno.copyFile(info.caCertFile, `${dir}/ca.crt`);
    await Deno.writeTextFile(`${dir}/namespace`, ns);

    await t.step(
      "no kubeconfig: in-cluster config, Connected as the ServiceAccount, ready",
      async () => {
        // startOperator passes the admin kubeconfig unless --kubeconfig is given; an empty one
        // means "none", so main.ts falls through to the in-cluster configuration.
        op = await startOperator(["--kubeconfig="], {
          KUBERNETES_SERVICE_HOST: "127.0.0.1",
          KUBERNETES_SERVICE_PORT: new URL(info.server).port,
          APPSERVICE_SERVICE_ACCOUNT_DIR: dir,
        });
        const connected = await connectedLine(op);
        assertEquals(connected.source, "in-cluster");
        assertEquals(connected.server, `https://127.0.0.1:${new URL(info.server).port}`);
        assertEquals(connected.user, saUser(ns, "operator"));
        await op.waitReady();
        assertEquals(await op.stop(), 0);
        op = undefined;
      },
    );

    await t.step("in cluster without a token file: one clear line, exit 1", async () => {
      await Deno.remove(`${dir}/token`);
      const bad = await startOperator(["--kubeconfig="], {
        KUBERNETES_SERVICE_HOST: "127.0.0.1",
        KUBERNETES_SERVICE_PORT: new URL(info.server).port,
        APPSERVICE_SERVICE_ACCOUNT_DIR: dir,
      });
      assertOneLineError(
        await exitOf(bad),
        /cannot read service account token .*token: no such file/,
      );
    });
  } finally {
    if (op) await op.stop("SIGKILL");
    await c.delete(CLUSTER_ROLE_BINDINGS, binding).catch((err) => {
      if (!isNotFound(err)) throw err;
    });
    await Deno.remove(dir, { recursive: true });
    await dropNamespace(ns);
  }
});

Deno.test("auth: unusable credentials fail loudly — never an anonymous request (S12)", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "auth-bad-" });
  try {
    await t.step("a client certificate signed by another CA: 401 from the apiserver", async () => {
      // A CA of its own and an X.509 v3 client certificate it signs, made as tests/cluster makes
      // the cluster's (same key type and extensions): only the issuer differs.
      const cnf = `${dir}/openssl.cnf`;
      await Deno.writeTextFile(
        cnf,
        [
          "[req]",
          "distinguished_name = dn",
          "prompt = no",
          "[dn]",
          "CN = unused",
          "[ca]",
          "basicConstraints = critical,CA:TRUE",
          "keyUsage = critical,keyCertSign,cRLSign,digitalSignature",
          "subjectKeyIdentifier = hash",
          "[client]",
          "basicConstraints = critical,CA:FALSE",
          "keyUsage = critical,digitalSignature,keyEncipherment",
          "extendedKeyUsage = clientAuth",
          "subjectKeyIdentifier = hash",
          "authorityKeyIdentifier = keyid",
          "",
        ].join("\n"),
      );
      const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
      // deno-fmt-ignore
      await openssl([
        "req", "-x509", "-new", "-config", cnf, "-extensions", "ca", ...ec,
        "-keyout", `${dir}/other-ca.key`, "-out", `${dir}/other-ca.crt`, "-days", "1",
        "-subj", "/CN=another-ca",
      ]);
      // deno-fmt-ignore
      await openssl([
        "req", "-new", "-config", cnf, ...ec, "-keyout", `${dir}/intruder.key`,
        "-out", `${dir}/intruder.csr`, "-subj", "/O=system:masters/CN=intruder",
      ]);
      // deno-fmt-ignore
      await openssl([
        "x509", "-req", "-in", `${dir}/intruder.csr`, "-CA", `${dir}/other-ca.crt`,
        "-CAkey", `${dir}/other-ca.key`, "-set_serial", "4242", "-days", "1",
        "-extfile", cnf, "-extensions", "client", "-out", `${dir}/intruder.crt`,
      ]);
      const path = await writeKubeconfig(`${dir}/intruder.yaml`, {
        "client-certificate": "intruder.crt",
        "client-key": "intruder.key",
      });
      const config = loadClusterConfig({ kubeconfig: path });
      assertEquals(config.auth.kind, "clientCertificate");
      const client = new KubeClient(config);
      try {
        const err = await assertRejects(() => whoAmI(client));
        assert(err instanceof ApiError && err.code === 401, `not a 401: ${err}`);
      } finally {
        client.close();
      }
      // The operator says so in one line and exits, instead of running as system:anonymous.
      const op = await startOperator([`--kubeconfig=${path}`]);
      assertOneLineError(
        await exitOf(op),
        /rejected the credential of kubeconfig .*intruder\.yaml.*401 Unauthorized/,
      );
    });

    await t.step("malformed credential sources: one clear line each, exit 1", async () => {
      await Deno.writeTextFile(`${dir}/fail.sh`, "#!/bin/sh\necho 'plugin says no' >&2\nexit 3\n");
      await Deno.writeTextFile(`${dir}/garbage.sh`, "#!/bin/sh\necho 'this is not JSON'\n");
      await Deno.chmod(`${dir}/fail.sh`, 0o755);
      await Deno.chmod(`${dir}/garbage.sh`, 0o755);
      await Deno.writeTextFile(`${dir}/empty-token`, "\n");
      const exec = (command: string) => ({
        exec: { apiVersion: "client.authentication.k8s.io/v1", command },
      });
      const cases: [string, Record<string, unknown>, RegExp][] = [
        ["missing-tokenfile", { tokenFile: "absent" }, /tokenFile .*absent: no such file/],
        ["empty-tokenfile", { tokenFile: "empty-token" }, /tokenFile .*empty-token is empty/],
        [
          "exec-fails",
          exec("./fail.sh"),
          /exec plugin .*fail\.sh exited with code 3: plugin says no/,
        ],
        [
          "exec-garbage",
          exec("./garbage.sh"),
          /garbage\.sh did not print an ExecCredential as JSON/,
        ],
        ["exec-missing", exec("./absent.sh"), /exec plugin .*absent\.sh could not run/],
        [
          "exec-alpha",
          { exec: { apiVersion: "client.authentication.k8s.io/v1alpha1", command: "./fail.sh" } },
          /exec apiVersion "client\.authentication\.k8s\.io\/v1alpha1" is not supported/,
        ],
        [
          "auth-provider",
          { "auth-provider": { name: "gcp" } },
          /auth-provider "gcp".*not supported/,
        ],
        ["basic-auth", { username: "u", password: "p" }, /basic auth .*not supported/],
        ["no-credential", {}, /no credential .*refusing to connect anonymously/],
      ];
      for (const [name, user, pattern] of cases) {
        const path = await writeKubeconfig(`${dir}/${name}.yaml`, user);
        // In process: a ConfigError (at load time, or when the first request needs the credential).
        const err = await assertRejects(async () => {
          const client = new KubeClient(loadClusterConfig({ kubeconfig: path }));
          try {
            await whoAmI(client);
          } finally {
            client.close();
          }
        });
        assert(err instanceof ConfigError, `${name}: not a ConfigError: ${err}`);
        assert(pattern.test(err.message), `${name}: "${err.message}" does not match ${pattern}`);
        assert(!err.message.includes("\n"), `${name}: more than one line`);
        // The operator: the same message, one line, non-zero exit.
        const op = await startOperator([`--kubeconfig=${path}`]);
        assertOneLineError(await exitOf(op), pattern);
      }
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
