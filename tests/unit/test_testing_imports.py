"""`safebeat.testing` ships the store contract without making pytest a dependency."""

from __future__ import annotations

import subprocess
import sys


def test_safebeat_and_its_testing_helpers_import_without_pytest() -> None:
    """Importing safebeat, its stores, `safebeat.testing` (FakeClock, memory_scheduler)
    and the scheduler imports no pytest; only `safebeat.testing.stores` does, and
    `safebeat.testing.StoreContract` is that module's class, imported when asked."""
    code = (
        "import sys\n"
        "import safebeat, safebeat.stores, safebeat.testing, safebeat.beat.scheduler\n"
        "from safebeat.testing import FakeClock, memory_scheduler\n"
        "assert 'pytest' not in sys.modules and '_pytest' not in sys.modules\n"
        "from safebeat.testing import StoreContract\n"
        "import safebeat.testing.stores\n"
        "assert StoreContract is safebeat.testing.stores.StoreContract\n"
        "assert 'pytest' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
