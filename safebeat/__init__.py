"""safebeat: Celery beat you can run in every replica; each scheduled window is dispatched once.

celery -A proj beat -S safebeat.Scheduler
"""

from safebeat._version import __version__
from safebeat.scheduler import Scheduler

__all__ = ["Scheduler", "__version__"]
