"""safebeat: Celery beat you can run in every replica; each scheduled window is dispatched once.

celery -A proj beat -S safebeat.Scheduler
"""

from safebeat._version import __version__
from safebeat.beat.scheduler import Scheduler
from safebeat.current import CurrentWindow, current_window
from safebeat.effects import claim

__all__ = ["CurrentWindow", "Scheduler", "__version__", "claim", "current_window"]
