/**
 * deploy/monitoring/ stays one set of alerts and names only metrics the operator exports:
 * - the PrometheusRule (deploy/monitoring/prometheus_rule.yaml) carries rules.yaml's groups, the
 *   chart's files/rules.yaml is a copy of rules.yaml, and the chart's PrometheusRule renders them;
 * - every metric name in the rules' and the dashboard's expressions is one lib/runtime/metrics.ts
 *   registers (or Prometheus's own `up`); tests/e2e/prometheus_scrape_test.ts checks the same
 *   names (the same `metricNames`) against a real Prometheus's scrape of the operator.
 */
import { assert, assertEquals } from "../assert.ts";
import { parse } from "yaml";
import { Metrics } from "../../lib/runtime/metrics.ts";
import { addAppServiceMetrics } from "../../lib/appservice/controller.ts";
import { helmTemplate, parseObjects } from "../e2e/chart.ts";
import { metricNames, monitoringExprs } from "../e2e/prometheus.ts";

const REPO = new URL("../../", import.meta.url).pathname;
const MON = `${REPO}/deploy/monitoring`;

/** A rule group of a Prometheus rule file: its name and rules (each with `expr`). */
interface Group {
  name: string;
  rules: { alert?: string; expr: string }[];
}

/** The groups of rules.yaml, the source of truth. */
function sourceGroups(): Group[] {
  return (parse(Deno.readTextFileSync(`${MON}/rules.yaml`)) as { groups: Group[] }).groups;
}

/** Names of the series the operator's /metrics exports, histograms with their suffixed series. */
async function exportedNames(): Promise<Set<string>> {
  const names = new Set(["up"]); // Prometheus's own, per scraped target
  const metrics = new Metrics();
  addAppServiceMetrics(metrics, () => []);
  for (const line of (await metrics.text()).split("\n")) {
    const m = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (!m) continue;
    names.add(m[1]);
    if (m[2] === "histogram") {
      for (const s of ["_bucket", "_sum", "_count"]) names.add(m[1] + s);
    }
  }
  return names;
}

Deno.test("the PrometheusRule carries rules.yaml's groups", () => {
  const rule = parse(Deno.readTextFileSync(`${MON}/prometheus_rule.yaml`));
  assertEquals(rule.kind, "PrometheusRule");
  assertEquals(rule.spec.groups, sourceGroups());
});

Deno.test("the chart's files/rules.yaml is rules.yaml, and its PrometheusRule renders them", async () => {
  assertEquals(
    Deno.readTextFileSync(`${REPO}/charts/appservice-operator/files/rules.yaml`),
    Deno.readTextFileSync(`${MON}/rules.yaml`),
  );
  const objects = parseObjects(await helmTemplate(["prometheusRule.enabled=true"]));
  const rules = objects.filter((o) => o.kind === "PrometheusRule");
  assertEquals(rules.length, 1);
  assertEquals((rules[0] as unknown as { spec: { groups: Group[] } }).spec.groups, sourceGroups());
});

Deno.test("rules and dashboard use only metric names the operator exports", async () => {
  const exported = await exportedNames();
  const exprs = monitoringExprs().map((e) => e.expr); // rules.yaml's and dashboard.json's
  let used = 0;
  for (const expr of exprs) {
    const names = metricNames(expr);
    assert(names.length > 0, `no metric name found in ${expr}`);
    for (const name of names) {
      assert(exported.has(name), `${name} (in ${expr}) is not exported by lib/runtime/metrics.ts`);
      used++;
    }
  }
  assert(used >= exprs.length);
  // Positive control: the extraction does reject a name the operator does not export.
  assertEquals(metricNames('sum by (x) (rate(not_a_metric_total{a="b"}[5m]))'), [
    "not_a_metric_total",
  ]);
  assert(!exported.has("not_a_metric_total"));
});

Deno.test("metricNames: selectors only, not functions, keywords, durations, numbers or strings", () => {
  const cases: [string, string[]][] = [
    ['absent(up{job="a"} == 1)', ["up"]],
    ["sum by (name) (leader_election_master_status) == 0", ["leader_election_master_status"]],
    [
      "histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[5m] offset 1h)))",
      ["x_seconds_bucket"],
    ],
    ["a / on (instance) group_left (job) b > bool 1e3", ["a", "b"]],
    ['max_over_time(q[1h:5m]) or vector(0) unless c{l="sum(x)"}', ["q", "c"]],
    ['{__name__="by_name", job="j"} + sum (d) + count_values("v", e)', ["by_name", "d", "e"]],
    ["f and Inf < NaN - g", ["f", "g"]],
  ];
  for (const [expr, names] of cases) assertEquals(metricNames(expr), names, expr);
});
