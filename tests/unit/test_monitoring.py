"""The shipped alert rules and dashboard: valid PromQL, and only metrics the docs list."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import Counter, Histogram

from safebeat.beat.metrics import BEAT_METRICS
from safebeat.ops.exporter import EXPORTER_SERIES
from safebeat.worker.metrics import WORKER_METRICS

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
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


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


def registered_names() -> set[str]:
    """Every sample name beat, the worker hook and the exporter can serve, as the code
    registers them (a counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`)."""
    names: set[str] = set()
    for metric in (*BEAT_METRICS, *WORKER_METRICS):
        if metric.kind is Counter:
            names.add(f"{metric.name}_total")
        elif metric.kind is Histogram:
            names |= {f"{metric.name}{suffix}" for suffix in SUFFIXES}
        else:
            names.add(metric.name)
    names |= {s.name + ("_total" if s.counter else "") for s in EXPORTER_SERIES}
    return names


def filled(expr: str) -> str:
    """`expr` as Grafana sends it: its variables filled in."""
    return expr.replace("$__rate_interval", "1m").replace("$job", ".*").replace("$namespace", ".*")


def panels() -> list[dict[str, Any]]:
    dashboard = json.loads((ROOT / "monitoring" / "dashboard.json").read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = dashboard["panels"]
    return found


def test_every_dashboard_query_parses_and_names_only_registered_metrics() -> None:
    """Each panel's query is valid PromQL once its variables are filled, and every metric it
    reads is one the code registers (a renamed metric fails here, not in Grafana)."""
    registered = registered_names()
    exprs = dashboard_exprs()
    assert len(exprs) > 20
    for expr in exprs:
        promql_parser.parse(filled(expr))
        names = set(re.findall(r"\b(safebeat_[a-z_]+)\b", expr)) - {"safebeat_namespace"}
        assert names, expr
        assert names <= registered, (expr, names - registered)


def test_every_query_selects_by_job_and_namespace_and_rates_over_the_rate_interval() -> None:
    """The `job` and `namespace` variables reach every selector; rates use $__rate_interval."""
    for expr in dashboard_exprs():
        for metric, braces in re.findall(r"\b(safebeat_[a-z_]+)(\{[^}]*\})?", expr):
            if metric != "safebeat_namespace":
                assert 'job=~"$job"' in braces, (expr, metric)
                assert 'safebeat_namespace=~"$namespace"' in braces, (expr, metric)
        for window in re.findall(r"\[([^\]]+)\]", expr):
            assert window == "$__rate_interval", expr


def test_the_dashboard_opens_on_is_beat_healthy_and_lays_out_without_overlap() -> None:
    """The top row answers "is beat healthy" with six stats; panels have unique ids, use the
    chosen data source and do not overlap on Grafana's 24-column grid."""
    laid = panels()
    assert laid[0]["type"] == "row"
    assert laid[0]["title"] == "Is beat healthy"
    top = [p for p in laid if p["gridPos"]["y"] == 1]
    assert [p["title"] for p in top] == [
        "Replicas alive",
        "Successful ticks/s",
        "Overdue entries",
        "Failing entries",
        "Unsent claims",
        "Store errors/s",
    ]
    assert {p["type"] for p in top} == {"stat"}
    assert len({p["id"] for p in laid}) == len(laid)
    cells: set[tuple[int, int]] = set()
    for panel in laid:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(box["x"], box["x"] + box["w"])
            for y in range(box["y"], box["y"] + box["h"])
        }
        assert not mine & cells, panel["title"]
        cells |= mine
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_overdue_and_failing_entries_are_topk_tables() -> None:
    """At 10,000 entries per-entry lines are unreadable: the entries needing attention are
    tables of the worst 20."""
    by_title = {p["title"]: p for p in panels()}
    for title in ("Most overdue entries", "Failing entries"):
        panel = by_title[title]
        assert panel["type"] == "table"
        assert panel["targets"][0]["expr"].startswith("topk(20, ")
    titles = set(by_title)
    assert {"Re-publishes (top 10 entries)", "Runs taken over (top 10 entries)"} <= titles


def test_the_dashboard_has_job_and_namespace_variables() -> None:
    """`job` picks the scrape jobs (beats, workers, exporter), `namespace` the safebeat one."""
    dashboard = json.loads((ROOT / "monitoring" / "dashboard.json").read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "job", "namespace"} <= set(variables)
    assert variables["namespace"]["query"].endswith("safebeat_namespace)")
