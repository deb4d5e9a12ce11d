"""monitoring/alerts.yaml is the chart's alert rules (templates/_alerts.tpl) rendered with
the chart's default values: one source for both. Run this file to rewrite it after a change."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.chart.rendering import CHART, ROOT, one, render

ALERTS = ROOT / "monitoring" / "alerts.yaml"
HEADER = """\
# Prometheus alert rules for safebeat: load this file with `rule_files`. Generated from the
# Helm chart (charts/safebeat/templates/_alerts.tpl) at its default values by
# `python tests/chart/test_alert_rules_file.py`; edit the template, not this file. Tune the
# thresholds, severities and selector there (values.yaml, prometheusRule) or in a copy.
# Runbooks and the Alertmanager inhibition advice: docs/metrics.md#alerts
"""
#: What the chart refuses to render without; none of it reaches the rules.
REQUIRED = {
    "app": "proj",
    "image": {"repository": "proj", "tag": "1.0"},
    "store": {"existingSecret": "s"},
}


def rendered_groups(**rule_values: Any) -> list[dict[str, Any]]:
    """The PrometheusRule's groups at the default values, with `rule_values` merged into
    `prometheusRule`."""
    values = {**REQUIRED, "prometheusRule": {"enabled": True, **rule_values}}
    groups: list[dict[str, Any]] = one(render(CHART, values), "PrometheusRule")["spec"]["groups"]
    return groups


def alerts_file() -> str:
    body = yaml.safe_dump({"groups": rendered_groups()}, sort_keys=False, width=10_000)
    return HEADER + body


def test_monitoring_alerts_are_the_charts_rules_at_default_values() -> None:
    """Regenerate with `python tests/chart/test_alert_rules_file.py` after changing the rules."""
    assert ALERTS.read_text(encoding="utf-8") == alerts_file()


def test_values_set_thresholds_severities_selector_and_links() -> None:
    """A selector reaches every metric, a threshold and a severity their alert, and every
    alert links its runbook (absolute) and the dashboard."""
    groups = rendered_groups(
        selector='job="billing"',
        runbookBaseUrl="https://runbooks.example.com/safebeat",
        dashboardUrl="https://grafana.example.com/d/safebeat/safebeat",
        alerts={"SafebeatReplicasLow": {"severity": "page", "for": "1m", "threshold": 1}},
    )
    rules = {rule["alert"]: rule for group in groups for rule in group["rules"]}
    low = rules["SafebeatReplicasLow"]
    assert low["expr"] == 'max by (safebeat_namespace) (safebeat_replicas_alive{job="billing"}) < 1'
    assert (low["labels"]["severity"], low["for"]) == ("page", "1m")
    assert rules["SafebeatEntriesOverdue"]["labels"]["severity"] == "critical"
    for name, rule in rules.items():
        selectors = re.findall(r"\b(safebeat_[a-z_]+)(\{[^}]*\})?", rule["expr"])
        metrics = [(m, braces) for m, braces in selectors if m != "safebeat_namespace"]
        assert metrics, name
        for metric, braces in metrics:
            assert braces.startswith('{job="billing"'), (name, metric)
        annotations = rule["annotations"]
        assert annotations["runbook_url"] == (
            f"https://runbooks.example.com/safebeat#{name.lower()}"
        )
        assert annotations["dashboard_url"] == "https://grafana.example.com/d/safebeat/safebeat"
        assert annotations["summary"]
        assert annotations["description"]


def test_replicas_low_defaults_to_the_replicas_the_chart_runs() -> None:
    """No threshold set: an install of one replica does not fire forever."""
    rules = {r["alert"]: r for g in rendered_groups() for r in g["rules"]}
    assert rules["SafebeatReplicasLow"]["expr"].endswith("< 2")
    values = {**REQUIRED, "replicas": 1, "prometheusRule": {"enabled": True}}
    groups = one(render(CHART, values), "PrometheusRule")["spec"]["groups"]
    rules = {r["alert"]: r for g in groups for r in g["rules"]}
    assert rules["SafebeatReplicasLow"]["expr"].endswith("< 1")


if __name__ == "__main__":
    ALERTS.write_text(alerts_file(), encoding="utf-8")
