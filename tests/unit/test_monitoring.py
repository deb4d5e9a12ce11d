"""The shipped alert rules and dashboard: valid PromQL, and only metrics the docs list."""

from __future__ import annotations

import json
import re
from pathlib import Path

import promql_parser
import pytest
import yaml

ROOT = Path(__file__).parents[2]
SUFFIXES = ("_bucket", "_count", "_sum")


def documented_metrics(section: str | None = None) -> dict[str, str]:
    """Metric name -> type, from the tables in docs/metrics.md (counters get `_total`);
    only those under the heading `### <section>` when given ("From beat", "From workers")."""
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    if section is not None:
        text = text.split(f"### {section}\n", 1)[1].split("\n### ", 1)[0]
    table = re.findall(r"^\| `(safebeat_[a-z_]+)` \| (counter|gauge|histogram) \|", text, re.M)
    assert table, f"docs/metrics.md has no metrics table {section or ''}"
    return dict(table)


def used_metrics(expr: str) -> set[str]:
    names = set(re.findall(r"\b(safebeat_[a-z_]+)\b", expr)) - {"safebeat_namespace"}
    return {next((n.removesuffix(s) for s in SUFFIXES if n.endswith(s)), n) for n in names}


def alert_rules() -> list[dict[str, object]]:
    document = yaml.safe_load((ROOT / "monitoring" / "alerts.yaml").read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((ROOT / "monitoring" / "dashboard.json").read_text(encoding="utf-8"))
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_alert_rules_parse_and_use_documented_metrics(rule: dict[str, object]) -> None:
    """Every alert is valid PromQL, links an absolute runbook section and the dashboard, has
    a summary and a description, and uses only documented metrics."""
    expr = str(rule["expr"])
    promql_parser.parse(expr)
    assert used_metrics(expr) <= set(documented_metrics()), expr
    annotations = rule["annotations"]
    assert isinstance(annotations, dict)
    assert annotations["summary"]
    assert annotations["description"]
    assert annotations["dashboard_url"]
    runbook = str(annotations["runbook_url"])
    assert runbook.startswith("https://"), runbook
    anchor = runbook.split("#", 1)[1]
    headings = re.findall(r"^### (\w+)$", (ROOT / "docs" / "metrics.md").read_text(), re.M)
    assert anchor in {h.lower() for h in headings}


def test_dashboard_loads_and_every_panel_query_parses() -> None:
    """The Grafana dashboard is valid JSON; each query parses once its variables are filled."""
    exprs = dashboard_exprs()
    assert exprs
    for expr in exprs:
        promql_parser.parse(expr.replace("$namespace", ".*"))
        assert used_metrics(expr) <= set(documented_metrics()), expr
