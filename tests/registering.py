"""Registering entries in a test and reading their states back: `register` returns only
the changed entries, so a test that wants the states reads them with `states`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from safebeat.identity import Replica
from safebeat.records import Definition, EntryState


def registered(
    store: Any, namespace: str, definitions: Sequence[Definition], replica: Replica
) -> dict[str, EntryState]:
    """Register `definitions` in `store`; the states of those entries afterwards."""
    store.register(namespace, definitions, replica)
    names = {d.name for d in definitions}
    return {name: state for name, state in store.states(namespace).items() if name in names}
