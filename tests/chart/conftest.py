"""Fixtures of the chart tests: the example application chart with its dependency built."""

from __future__ import annotations

import shutil
from pathlib import Path

import helm_python as helm
import pytest

from tests.chart.rendering import CHART, EXAMPLE, ROOT


@pytest.fixture(scope="session")
def example_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/helm-app with `helm dependency update` run on a copy: charts/ holds safebeat.

    The copy keeps the repository's layout, so the example's `file://../../charts/safebeat`
    resolves to this checkout's chart, and nothing is written into the work tree.
    """
    copy = tmp_path_factory.mktemp("repo")
    shutil.copytree(CHART, copy / CHART.relative_to(ROOT))
    example = copy / EXAMPLE.relative_to(ROOT)
    shutil.copytree(EXAMPLE, example)
    helm.dependency_update(example)
    return example
