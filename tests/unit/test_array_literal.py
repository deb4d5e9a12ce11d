"""PostgreSQL array parameters built column at a time are the element-by-element text."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from safebeat.stores.sql_common import _array_element, array_literal

WINDOW = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
VALUES = [
    "a",
    'quo"te',
    "back\\slash",
    "",
    "two words",
    None,
    0,
    1,
    True,
    False,
    WINDOW,
    WINDOW + timedelta(seconds=1),
    WINDOW.astimezone(timezone(timedelta(hours=2))),
]


def element_by_element(values: list[object]) -> str:
    return "{" + ",".join(map(_array_element, values)) + "}"  # type: ignore[arg-type]


def test_every_mix_of_values_gives_the_element_by_element_text() -> None:
    rng = random.Random(33)
    for _ in range(5000):
        values = [rng.choice(VALUES) for _ in range(rng.randint(0, 6))]
        assert array_literal(values) == element_by_element(values)  # type: ignore[arg-type]
        assert array_literal(iter(values)) == element_by_element(values)  # type: ignore[arg-type]


def test_a_column_of_names_with_nulls_is_quoted_and_nulled() -> None:
    assert array_literal(["a", None, "b"]) == '{"a",NULL,"b"}'
    assert array_literal([]) == "{}"
    assert array_literal([None, None]) == "{NULL,NULL}"
