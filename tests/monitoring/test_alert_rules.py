"""monitoring/alerts.yaml under Prometheus's own rule engine: `promtool test rules` runs the
cases of monitoring/tests/ (a deploy, a store outage, a business-hours crontab at night, a
pause, first increments), and `promtool check rules` the file itself.

promtool comes with Debian's `prometheus` package (.ci/run installs it). The cases check
when alerts fire, by their labels: their annotations are left out of the copy of the rules
they run on (tests/chart/test_alert_rules_file.py checks those).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.chart.rendering import CHART, ci_values, merged, one, render

ROOT = Path(__file__).parents[2]
RULES = ROOT / "monitoring" / "alerts.yaml"
CASES = sorted((ROOT / "monitoring" / "tests").glob("*.yaml"))
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian: apt-get install prometheus; .ci/run does)",
)


def promtool(*arguments: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *map(str, arguments)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_rules_file_passes_promtool_check() -> None:
    """Valid rules, by Prometheus's own parser and linter."""
    result = promtool("check", "rules", RULES, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_there_is_a_case_for_each_situation_the_alerts_must_survive() -> None:
    """The five situations of issue 31 each have their file."""
    names = {case.stem for case in CASES}
    assert {"deploy", "store_outage", "business_hours", "pause", "first_increment"} <= names


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.stem)
def test_promtool_cases(case: Path, tmp_path: Path) -> None:
    """Each case's alerts fire, and stay quiet, exactly when it says."""
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in document["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    shutil.copy(case, tmp_path / case.name)
    result = promtool("test", "rules", case.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("threshold", [1_000_000, 450.5, 0])
def test_rules_rendered_with_any_schema_valid_threshold_pass_promtool(
    threshold: float, tmp_path: Path
) -> None:
    """A threshold the schema accepts renders valid PromQL, also where it becomes a range
    selector (whole seconds, more than none), which a float or 1e+06 would break."""
    alerts = {name: {"thresholdSeconds": threshold} for name in ("SafebeatExporterStale",)}
    values = merged(
        ci_values("standalone"), {"prometheusRule": {"enabled": True, "alerts": alerts}}
    )
    rule = one(render(CHART, values), "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_namespace_selector_narrows_every_rule_and_still_fires(tmp_path: Path) -> None:
    """With `prometheusRule.selector: safebeat_namespace="billing"`, the one the docs
    advise, the rules are valid and the exporter alert fires for billing's dead exporter
    and not for mail's, whose series the selector leaves out."""
    values = merged(
        ci_values("standalone"),
        {"prometheusRule": {"enabled": True, "selector": 'safebeat_namespace="billing"'}},
    )
    rule = one(render(CHART, values), "PrometheusRule")
    groups = rule["spec"]["groups"]
    for group in groups:
        for each in group["rules"]:
            each.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    assert promtool("check", "rules", "rules.yaml", cwd=tmp_path).returncode == 0
    case = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f'safebeat_replica_info{{safebeat_namespace="{ns}"}}',
                        "values": "1x30",
                    }
                    for ns in ("billing", "mail")
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "20m",
                        "alertname": "SafebeatExporterStale",
                        "exp_alerts": [
                            {"exp_labels": {"severity": "warning", "safebeat_namespace": "billing"}}
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(case))
    result = promtool("test", "rules", "case.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
