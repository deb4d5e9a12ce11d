"""The beat process: Celery's Scheduler interface, the tick (plan under the store's lock,
claim, publish) and its chores. `safebeat.Scheduler` is `beat.scheduler.Scheduler`."""
