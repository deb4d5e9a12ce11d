"""docs/extending.md says what a store plugin implements and which hooks an integration has,
and shows the examples' files as they are."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from safebeat import hooks
from safebeat.stores import protocols
from tests.docpages import blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "extending.md").read_text()
EXAMPLE = ROOT / "examples" / "store_plugin"
PROTOCOLS = (
    protocols.StoreConnection,
    protocols.TickStore,
    protocols.ExecutionStore,
    protocols.EffectStore,
    protocols.AdminStore,
    protocols.RuntimeEntryStore,
)


def own_members(protocol: type) -> set[str]:
    names = {*vars(protocol), *vars(protocol).get("__annotations__", {})}
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_the_page_lists_every_method_of_each_store_protocol(protocol: type) -> None:
    """The table's row for each protocol names exactly its methods and attributes."""
    row = next(line for line in PAGE.splitlines() if line.startswith(f"| `{protocol.__name__}`"))
    listed = set(re.findall(r"`(\w+)`", row.split("|")[3]))
    assert listed == own_members(protocol)


def test_the_page_shows_the_examples_entry_point_and_contract_as_they_are() -> None:
    """The entry point and the contract class shown are the example package's own."""
    labelled = {block.label: block.text for block in blocks(PAGE) if block.label}
    pyproject = (EXAMPLE / "pyproject.toml").read_text()
    assert labelled["plugin-entry-point"].strip() in pyproject
    module = (EXAMPLE / "test_example_store.py").read_text()
    assert labelled["plugin-contract"].strip() in module


@pytest.mark.parametrize(
    ("register", "record"),
    [
        ("around_publish", hooks.Publish),
        ("around_tick", hooks.Tick),
        ("on_delivery", hooks.Delivery),
        ("on_run_end", hooks.RunEnd),
    ],
)
def test_the_page_lists_each_hook_with_every_field_it_passes(register: str, record: type) -> None:
    """The integration section's table has a row per hook, naming every field of its record."""
    row = next(line for line in PAGE.splitlines() if line.startswith(f"| `{register}("))
    assert callable(getattr(hooks, register))
    passed = row.split("|")[3]
    assert passed.strip().startswith(f"`{record.__name__}`")
    listed = set(re.findall(r"`(\w+)`", passed))
    assert {field.name for field in dataclasses.fields(record)} <= listed


def test_the_page_shows_the_healthchecks_example_as_it_is() -> None:
    """The registration shown is the example module's own."""
    labelled = {block.label: block.text for block in blocks(PAGE) if block.label}
    module = (ROOT / "examples" / "healthchecks" / "healthchecks_ping.py").read_text()
    assert labelled["healthchecks-install"].strip("\n") in module
