"""The beat process: Celery's Scheduler interface over the tick engine (plan under the store's
lock, claim, publish) and its chores. `safebeat.Scheduler` is `beat.scheduler.Scheduler`;
the engine is `beat.engine.TickEngine`."""
