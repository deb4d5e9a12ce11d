"""Windows run by this process rather than published to Celery: `safebeat exec` for cron
lines and Kubernetes CronJobs, and the claim/start/finish steps the APScheduler executor shares."""
