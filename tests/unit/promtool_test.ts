/**
 * deploy/monitoring/'s alerts checked by the real promtool (the pinned Prometheus 3.16.0, built by
 * tests/cluster/build_prometheus.sh; no cluster needed):
 * - `promtool check rules --lint=all --lint-fatal` passes on rules.yaml, on the chart's
 *   files/rules.yaml and on the PrometheusRule's groups;
 * - `promtool test rules prometheus_rules_test.yaml` passes, against rules.yaml and against the
 *   chart's copy;
 * - every alert has a firing and a not-firing case, and they bite: with the alert removed from a
 *   copy of the rules a firing case fails, with the alert made to fire always a not-firing case
 *   fails;
 * - positive controls: an unparsable expression fails `check rules`, a wrong expected label fails
 *   `test rules`.
 */
import { parse, stringify } from "yaml";
import { assert, assertEquals } from "../assert.ts";
import { MONITORING, promtool, type RuleGroup, ruleGroups } from "../e2e/prometheus.ts";
import { REPO } from "../e2e/harness.ts";

const TESTS = `${MONITORING}/prometheus_rules_test.yaml`;
const CHART_RULES = `${REPO}/charts/appservice-operator/files/rules.yaml`;

/** One `alert_rule_test` of a promtool test file. */
interface AlertCase {
  alertname: string;
  eval_time: string;
  exp_alerts?: unknown[];
}

/** The alert cases of prometheus_rules_test.yaml. */
function alertCases(): AlertCase[] {
  const doc = parse(Deno.readTextFileSync(TESTS)) as { tests: { alert_rule_test?: AlertCase[] }[] };
  return doc.tests.flatMap((t) => t.alert_rule_test ?? []);
}

/** The alert names of rules.yaml, in order. */
const alertNames = () => ruleGroups().flatMap((g) => g.rules.flatMap((r) => r.alert ?? []));

/** A failed case in promtool's `test rules` output: the alert, and whether it expected none. */
interface FailedCase {
  alertname: string;
  time: string;
  expectedNone: boolean;
}

/** The failed alert cases promtool's `test rules` output lists (`alertname: A, time: T, exp:[…]`). */
function failedCases(output: string): FailedCase[] {
  return [...output.matchAll(/alertname: (\S+), time: (\S+),\s*exp:(\[\]|\(nil\))?/g)].map((m) => ({
    alertname: m[1],
    time: m[2],
    expectedNone: m[3] !== undefined,
  }));
}

/**
 * A temporary folder holding `rules` as rules.yaml (text, or groups written as YAML) beside a copy
 * of prometheus_rules_test.yaml; runs `promtool test rules` there and removes the folder.
 */
async function testRulesWith(rules: string | RuleGroup[]) {
  const dir = await Deno.makeTempDir({ prefix: "promtool-" });
  try {
    const text = typeof rules === "string" ? rules : stringify({ groups: rules });
    await Deno.writeTextFile(`${dir}/rules.yaml`, text);
    await Deno.copyFile(TESTS, `${dir}/prometheus_rules_test.yaml`);
    return await promtool(["test", "rules", "prometheus_rules_test.yaml"], dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** `promtool check rules --lint=all --lint-fatal` on a temporary file holding `text`. */
async function checkRulesText(text: string) {
  const dir = await Deno.makeTempDir({ prefix: "promtool-" });
  try {
    await Deno.writeTextFile(`${dir}/rules.yaml`, text);
    return await promtool(["check", "rules", "--lint=all", "--lint-fatal", "rules.yaml"], dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("promtool check rules: rules.yaml, the chart's copy, the PrometheusRule", async () => {
  const rules = Deno.readTextFileSync(`${MONITORING}/rules.yaml`);
  const count = alertNames().length;
  const rule = parse(Deno.readTextFileSync(`${MONITORING}/prometheus_rule.yaml`));
  for (
    const [what, text] of [
      ["deploy/monitoring/rules.yaml", rules],
      ["charts/appservice-operator/files/rules.yaml", Deno.readTextFileSync(CHART_RULES)],
      ["deploy/monitoring/prometheus_rule.yaml's spec", stringify({ groups: rule.spec.groups })],
    ]
  ) {
    const r = await checkRulesText(text);
    assertEquals(r.code, 0, `${what}:\n${r.output}`);
    assert(r.output.includes(`SUCCESS: ${count} rules found`), `${what}:\n${r.output}`);
  }
  // Positive control: an unparsable expression fails the same check.
  const broken = rules.replace(
    /workqueue_depth\{job="appservice-operator-metrics"\}\) > 100/,
    'workqueue_depth{job="appservice-operator-metrics"} > 100',
  );
  assert(broken !== rules, "the positive control's edit found nothing to change");
  const r = await checkRulesText(broken);
  assertEquals(r.code, 1, r.output);
  assert(r.output.includes("could not parse expression"), r.output);
});

Deno.test("promtool test rules: prometheus_rules_test.yaml on rules.yaml and the chart's copy", async () => {
  const own = await promtool(["test", "rules", "prometheus_rules_test.yaml"]);
  assertEquals(own.code, 0, own.output);
  assert(own.output.includes("SUCCESS"), own.output);
  const chart = await testRulesWith(Deno.readTextFileSync(CHART_RULES));
  assertEquals(chart.code, 0, chart.output);
  // Positive control: one expected label wrong, and the same run fails naming that alert.
  const tests = Deno.readTextFileSync(TESTS);
  const wrong = tests.replace(
    "exp_labels: { severity: critical }",
    "exp_labels: { severity: page }",
  );
  assert(wrong !== tests, "the positive control's edit found nothing to change");
  const dir = await Deno.makeTempDir({ prefix: "promtool-" });
  try {
    await Deno.copyFile(`${MONITORING}/rules.yaml`, `${dir}/rules.yaml`);
    await Deno.writeTextFile(`${dir}/prometheus_rules_test.yaml`, wrong);
    const r = await promtool(["test", "rules", "prometheus_rules_test.yaml"], dir);
    assertEquals(r.code, 1, r.output);
    assertEquals(failedCases(r.output).map((c) => c.alertname), ["AppServiceOperatorDown"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("promtool test rules: every alert has a firing and a not-firing case, and both bite", async (t) => {
  const alerts = alertNames();
  const cases = alertCases();
  assert(alerts.length > 0, "no alert in rules.yaml");

  await t.step("each alert has both kinds of case; each case names an alert of rules.yaml", () => {
    for (const c of cases) assert(alerts.includes(c.alertname), `${c.alertname}: no such alert`);
    for (const a of alerts) {
      const mine = cases.filter((c) => c.alertname === a);
      assert(mine.some((c) => (c.exp_alerts ?? []).length > 0), `${a}: no firing case`);
      assert(mine.some((c) => (c.exp_alerts ?? []).length === 0), `${a}: no not-firing case`);
    }
  });

  /** rules.yaml's groups with `edit` applied to the rule of alert `a` (dropped when it returns undefined). */
  const editAlert = (
    a: string,
    edit: (r: RuleGroup["rules"][0]) => RuleGroup["rules"][0] | undefined,
  ) =>
    ruleGroups().map((g) => ({
      ...g,
      rules: g.rules.flatMap((r) => r.alert === a ? (edit(r) ?? []) : [r]),
    }));

  for (const a of alerts) {
    await t.step(
      `${a}: removed, a firing case fails; firing always, a not-firing case fails`,
      async () => {
        const removed = await testRulesWith(editAlert(a, () => undefined));
        assertEquals(removed.code, 1, removed.output);
        const missed = failedCases(removed.output);
        assert(missed.some((c) => c.alertname === a && !c.expectedNone), removed.output);
        assert(missed.every((c) => c.alertname === a), removed.output);

        const always = await testRulesWith(editAlert(a, (r) => {
          const { for: _, ...rest } = r;
          return { ...rest, expr: "vector(1)" };
        }));
        assertEquals(always.code, 1, always.output);
        const fired = failedCases(always.output);
        assert(fired.some((c) => c.alertname === a && c.expectedNone), always.output);
        assert(fired.every((c) => c.alertname === a), always.output);
      },
    );
  }
});
