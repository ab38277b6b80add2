/**
 * deploy/monitoring/ against a real Prometheus (issue 28): the pinned Prometheus 3.16.0
 * (tests/cluster/build_prometheus.sh) scrapes the operator's HTTPS `/metrics` exactly as
 * deploy/monitoring/service_monitor.yaml tells the Prometheus Operator to (scheme, path, the
 * ServiceAccount's bearer token file, its tlsConfig), with a token of a ServiceAccount bound to
 * deploy/'s metrics-reader ClusterRole, and loads deploy/monitoring/rules.yaml:
 * - the target is up with the token, and down with 401 without it (the same config less the
 *   token);
 * - every metric name the rules' and the dashboard's expressions use is among the names of that
 *   scrape (`/api/v1/label/__name__/values`); a name nobody exports is reported missing by the
 *   same check, and so are the operator's names in the token-less job's scrape;
 * - every rule of rules.yaml is evaluated with health "ok" (a control rule whose evaluation fails
 *   shows "err" in the same list); with the operator leading, AppServiceOperatorDown and
 *   AppServiceOperatorNoLeader are inactive and NoLeader's sum sees the Lease; the operator
 *   stopped, its target goes down and AppServiceOperatorDown turns pending.
 *
 * Every address is 127.0.0.1; every wait is bounded; Prometheus is stopped and its folder removed.
 */
import { parse as parseYaml, stringify } from "yaml";
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  type Operator,
  REPO,
  startOperator,
  waitFor,
} from "./harness.ts";
import { helmTemplate, parseObjects } from "./chart.ts";
import { mintToken } from "./resources.ts";
import { bindMetricsReader, createServiceAccounts } from "./secure_metrics.ts";
import {
  type ActiveTarget,
  evaluated,
  loadedRules,
  missingNames,
  MONITORING,
  monitoringExprs,
  type NameUse,
  type PrometheusServer,
  ruleGroups,
  scrapeConfig,
  type ServiceMonitorEndpoint,
  startPrometheus,
  usedMetricNames,
} from "./prometheus.ts";

/** A ServiceMonitor's spec, as far as the translation reads it. */
type ServiceMonitor = KubeObject & {
  spec: { selector: { matchLabels: Record<string, string> }; endpoints: ServiceMonitorEndpoint[] };
};

/** The job of the same scrape without the token: its target must be down (401). */
const NO_TOKEN_JOB = "e2e-no-token";

/**
 * A control rule whose evaluation fails at run time: both jobs scrape the same instance, so
 * relabelling `job` to one value gives two series with one label set.
 */
const CONTROL_RULES = {
  groups: [{
    name: "e2e-control",
    rules: [{ record: "e2e:up_one_job", expr: 'label_replace(up, "job", "same", "", "")' }],
  }],
};

/** Instant query `expr`; its samples' labels and values. */
async function query(p: PrometheusServer, expr: string) {
  const data = await p.api<
    { result: { metric: Record<string, string>; value: [number, string] }[] }
  >(
    "/api/v1/query",
    { query: expr },
  );
  return data.result.map((s) => ({ labels: s.metric, value: s.value[1] }));
}

/** The active targets of `/api/v1/targets` by job. */
async function targets(p: PrometheusServer): Promise<Map<string, ActiveTarget>> {
  const data = await p.api<{ activeTargets: ActiveTarget[] }>("/api/v1/targets", {
    state: "active",
  });
  return new Map(data.activeTargets.map((t) => [t.labels.job, t]));
}

Deno.test("monitoring: a real Prometheus scrapes /metrics as the ServiceMonitor says; rules and dashboard names exist", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("prom");
  const dir = await Deno.makeTempDir({ prefix: "prometheus-e2e-" });
  await createServiceAccounts(ns, ["prometheus"]);
  const unbind = await bindMetricsReader(`e2e-${ns}`, ns, ["prometheus"]);
  let op: Operator | undefined;
  let prom: PrometheusServer | undefined;
  try {
    // As deploy/deployment.yaml runs it: secure metrics, leader election, 4 workers.
    op = await startOperator([
      "--metrics-secure",
      "--leader-elect",
      `--leader-election-namespace=${ns}`,
      "--leader-election-id=prom-scrape",
      "--max-concurrent-reconciles=4",
      `--watch-namespace=${ns}`,
    ]);
    await op.waitReady();
    // One AppService, so the per-namespace and per-reconcile series exist.
    await c.create(APPSERVICES as never, appService(ns, "web", { image: "nginx:1.27" }));
    await waitFor("web Ready", async () => (await getAs(ns, "web")).status?.ready, 60_000);

    const sm = parseYaml(
      Deno.readTextFileSync(`${MONITORING}/service_monitor.yaml`),
    ) as ServiceMonitor;
    const service = parseYaml(Deno.readTextFileSync(`${REPO}/deploy/service.yaml`)) as
      & KubeObject
      & { spec: { ports: { name: string }[] } };
    const endpoint = sm.spec.endpoints[0];
    const job = service.metadata!.name!;

    await t.step(
      "the ServiceMonitor selects deploy/'s metrics Service; the chart's is the same",
      async () => {
        assertEquals(sm.spec.endpoints.length, 1);
        for (const [k, v] of Object.entries(sm.spec.selector.matchLabels)) {
          assertEquals(service.metadata?.labels?.[k], v, `Service label ${k}`);
        }
        assert(
          service.spec.ports.some((p) => p.name === endpoint.port),
          `no port ${endpoint.port}`,
        );
        const chart = parseObjects(await helmTemplate(["serviceMonitor.enabled=true"]))
          .filter((o) => o.kind === "ServiceMonitor") as ServiceMonitor[];
        assertEquals(chart.length, 1);
        assertEquals(chart[0].spec.endpoints, sm.spec.endpoints);
      },
    );

    const tokenFile = `${dir}/token`;
    await Deno.writeTextFile(tokenFile, await mintToken(c, ns, "prometheus", 3600), {
      mode: 0o600,
    });
    const scrape = scrapeConfig(endpoint, {
      job,
      target: `127.0.0.1:${op.metricsPort}`,
      tokenFile,
      interval: "1s",
    });
    const { authorization: _, ...withoutToken } = scrape;
    await Deno.writeTextFile(`${dir}/control_rules.yaml`, stringify(CONTROL_RULES));
    const config = {
      global: { scrape_interval: "1s", evaluation_interval: "1s" },
      rule_files: [`${MONITORING}/rules.yaml`, `${dir}/control_rules.yaml`],
      scrape_configs: [scrape, { ...withoutToken, job_name: NO_TOKEN_JOB }],
    };
    console.log(`  prometheus.yml scrape config:\n${stringify(scrape).replace(/^/gm, "    ")}`);
    await Deno.writeTextFile(`${dir}/prometheus.yml`, stringify(config));
    prom = await startPrometheus(`${dir}/prometheus.yml`, `${dir}/data`);
    const p = prom;

    await t.step(
      "the target is up with the ServiceMonitor's token, down (401) without",
      async () => {
        const seen = await waitFor("both targets scraped, the operator's up", async () => {
          const ts = await targets(p);
          const own = ts.get(job);
          const none = ts.get(NO_TOKEN_JOB);
          return own?.health === "up" && none && none.health !== "unknown" && ts;
        }, 60_000).catch(async (err) => {
          throw new Error(`${err.message}\n${JSON.stringify([...(await targets(p)).values()])}`);
        });
        const own = seen.get(job)!;
        assertEquals(own.scrapeUrl, `https://127.0.0.1:${op!.metricsPort}/metrics`);
        assertEquals(own.lastError, "");
        const none = seen.get(NO_TOKEN_JOB)!;
        assertEquals(none.health, "down");
        assert(none.lastError.includes("401"), `no-token scrape: ${none.lastError}`);
      },
    );

    await t.step(
      "every metric name in rules.yaml and dashboard.json is in the scrape",
      async () => {
        const names = await p.api<string[]>("/api/v1/label/__name__/values", {
          "match[]": `{job="${job}"}`,
        });
        const uses = usedMetricNames();
        const exprs = monitoringExprs();
        for (const e of exprs) {
          assert(uses.some((u) => u.expr === e.expr), `no metric name found in ${e.expr}`);
        }
        const distinct = new Set(uses.map((u) => u.name));
        console.log(
          `  ${distinct.size} names used by ${exprs.length} expressions; scrape has ${names.length}`,
        );
        // A name missing from the series may still be declared (HELP/TYPE, which Prometheus keeps
        // as the target's metadata): a counter with labels that has no sample until it first counts.
        const metadata = await p.api<{ metric: string }[]>("/api/v1/targets/metadata", {
          match_target: `{job="${job}"}`,
        });
        const declared = new Set(metadata.map((m) => m.metric));
        const isDeclared = (n: string) =>
          declared.has(n) || declared.has(n.replace(/_(bucket|sum|count)$/, ""));
        const missing = missingNames(uses, names);
        const where = (m: NameUse) => `${m.name} (${m.file}: ${m.expr})`;
        assertEquals(
          missing.filter((m) => !isDeclared(m.name)).map(where),
          [],
          "names the rules or the dashboard use that the operator does not export",
        );
        // Every counter starts at 0 for each of its label sets (reflector_log.ts), so `increase()`
        // sees the first event: a name declared without a sample fails here too.
        assertEquals(missing.map(where), [], "names declared but without a sample in the scrape");
        // Positive controls: the same check reports a name nobody exports, and the operator's names
        // in the scrape of the job without a token (only Prometheus's own series there).
        const bogus = { name: "appservice_not_exported_total", file: "control", expr: "control" };
        const withBogus = missingNames([bogus, ...uses], names).filter((m) => !isDeclared(m.name));
        assertEquals(withBogus, [bogus]);
        const noTokenNames = await p.api<string[]>("/api/v1/label/__name__/values", {
          "match[]": `{job="${NO_TOKEN_JOB}"}`,
        });
        assert(noTokenNames.includes("up"), `no-token job: ${noTokenNames}`);
        const lacking = missingNames(uses, noTokenNames).map((m) => m.name);
        assert(lacking.includes("workqueue_depth"), `no-token job lacks only ${lacking}`);
      },
    );

    await t.step(
      "every rule of rules.yaml evaluates with health ok (a failing control: err)",
      async () => {
        const alerts = ruleGroups().flatMap((g) => g.rules.map((r) => r.alert ?? r.record));
        const rules = await waitFor(
          "every rule evaluated, the control's after both scrapes",
          async () => {
            const all = await loadedRules(p);
            const control = all.find((r) => r.name === "e2e:up_one_job");
            return all.length === alerts.length + 1 && all.every(evaluated) &&
              control?.health === "err" && all;
          },
          30_000,
        );
        const control = rules.find((r) => r.name === "e2e:up_one_job")!;
        assert(/same labelset/.test(control.lastError ?? ""), `control: ${control.lastError}`);
        const own = rules.filter((r) => r !== control);
        assertEquals(own.map((r) => r.name), alerts);
        for (const r of own) {
          assertEquals([r.name, r.health, r.lastError ?? ""], [r.name, "ok", ""], r.query);
        }
      },
    );

    await t.step(
      "the operator leading: Down and NoLeader inactive, NoLeader's sum sees the Lease",
      async () => {
        const leading = await waitFor("leader_election_master_status 1 in Prometheus", async () => {
          const s = await query(p, `sum by (name) (leader_election_master_status{job="${job}"})`);
          return s.length === 1 && s[0].value === "1" && s;
        }, 60_000);
        assertEquals(leading[0].labels, { name: "prom-scrape" });
        const since = Date.now();
        const rules = await waitFor("the alerts evaluated after that", async () => {
          const all = await loadedRules(p);
          const mine = all.filter((r) =>
            ["AppServiceOperatorDown", "AppServiceOperatorNoLeader"].includes(r.name)
          );
          return mine.length === 2 && mine.every((r) => Date.parse(r.lastEvaluation) > since) &&
            mine;
        }, 30_000);
        for (const r of rules) assertEquals([r.name, r.state], [r.name, "inactive"]);
        const ready = await query(
          p,
          `max by (namespace) (appservice_appservices{job="${job}", namespace="${ns}", ready="true"})`,
        );
        assertEquals(ready.map((s) => s.value), ["1"]);
      },
    );

    await t.step(
      "the operator stopped: its target down, AppServiceOperatorDown pending",
      async () => {
        await op!.stop();
        const own = await waitFor("the target down", async () => {
          const got = (await targets(p)).get(job);
          return got?.health === "down" && got;
        }, 30_000);
        assert(own.lastError !== "", "a down target names its error");
        const down = await waitFor("AppServiceOperatorDown evaluated after that", async () => {
          const r = (await loadedRules(p)).find((r) => r.name === "AppServiceOperatorDown");
          return r?.state !== "inactive" && r;
        }, 30_000);
        assertEquals(down.state, "pending"); // `for: 5m`
      },
    );
  } finally {
    if (prom) {
      const code = await prom.stop();
      if (code !== 0) console.log(`  prometheus exited ${code}:\n${prom.logs().slice(-2000)}`);
    }
    await op?.stop();
    await unbind();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true });
  }
});
