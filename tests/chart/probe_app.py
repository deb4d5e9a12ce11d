"""A Celery app for the probe test: `safebeat -A tests.chart.probe_app health` loads it."""

from celery import Celery

app = Celery("probe-app")
