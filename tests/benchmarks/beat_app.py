"""The Celery app of one `celery beat` replica in the peer benchmark (bench_peers.py).

`celery -A tests.benchmarks.beat_app beat -S <scheduler>` with the replica's description
as JSON in $SAFEBEAT_BENCH_BEAT (see `peers.beat_app`). Started by the benchmark only.
"""

from __future__ import annotations

import json
import os

from tests.benchmarks import peers

config = json.loads(os.environ["SAFEBEAT_BENCH_BEAT"])
app = peers.beat_app(config)  # sets Django up first where the kind needs it

if config["kind"] == peers.DCB:
    DjangoCeleryBeat = peers.dcb_class()
if config["kind"] == peers.REDBEAT:
    RedBeat = peers.redbeat_class()
