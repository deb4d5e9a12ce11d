"""The seed's double billing, replayed: three stock beats beside three safebeat beats.

What it shows. A Django project charges every subscription once a day from a
django-celery-beat `PeriodicTask`. The seed's incident: two pods each ran `celery beat`,
and subscribers were charged twice. This script runs the same project twice against
PostgreSQL, each time with three beat replicas and one worker, for `--seconds` (default
24; one billing day is 4 seconds):

1. three stock `celery beat -S django_celery_beat.schedulers:DatabaseScheduler`;
2. three `celery beat -S safebeat.contrib.django.DatabaseScheduler`.

Then it prints, for each, how often the charge task ran per billing day and how many
second charges the `UniqueConstraint(subscription, charge_date)` had to refuse. Stock
beat runs the task about three times a day, and only the constraint stops the double
charge; safebeat runs it once a day, and the constraint never has to step in. Either
way no subscription is charged twice for a day: that is the second layer doing its job.

What it needs. This repository's virtualenv with the Django extra
(`pip install -e '.[django,postgres]'`) and a PostgreSQL server that lets the URL below
create a database (`$DATABASE_URL`, default postgresql://postgres@127.0.0.1:5432/postgres).
The broker is kombu's `filesystem://` transport: no broker server.

How to run it, from the repository root:

    .venv/bin/python examples/django_billing/run.py --seconds 24

It creates (and drops first) the database `safebeat_billing_example`; logs and broker
files go to `.demo/django_billing/`. Exit status 0 when safebeat ran the task once per
billing day and charged every subscription once a day, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORK = ROOT / ".demo" / "django_billing"
DATABASE = "safebeat_billing_example"
SCHEDULERS = {
    "stock beat": "django_celery_beat.schedulers:DatabaseScheduler",
    "safebeat": "safebeat.contrib.django.DatabaseScheduler",
}


def create_database(admin_url: str) -> str:
    """(Re)create the example's database; return its URL."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    return urlsplit(admin_url)._replace(path=f"/{DATABASE}").geturl()


def celery(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "celery", "-A", "billing_site", *args]
    return subprocess.Popen(
        [*command, "-l", "INFO", "--logfile", str(log)],
        cwd=HERE,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


def run_phase(name: str, env: dict[str, str], seconds: float) -> dict[str, object]:
    """Run three beats of one kind and a worker; return what the charge task did."""
    from charges.models import ChargeRun, DailyCharge
    from django_celery_beat.models import PeriodicTask

    folder = WORK / name.replace(" ", "-")
    broker = folder / "broker"
    (broker / "processed").mkdir(parents=True)
    (broker / "control").mkdir()
    env = {**env, "BILLING_BROKER_FOLDER": str(broker)}
    ChargeRun.objects.all().delete()
    DailyCharge.objects.all().delete()
    PeriodicTask.objects.filter(name="daily-charge").update(last_run_at=None, total_run_count=0)
    worker = celery(env, folder / "worker.log", "worker", "--pool", "solo", "--without-gossip")
    beats = [
        celery(
            env,
            folder / f"beat-{i}.log",
            "beat",
            "-S",
            SCHEDULERS[name],
            "-s",
            str(folder / f"s{i}"),
        )
        for i in range(3)
    ]
    try:
        time.sleep(seconds)
        stop(beats)
        time.sleep(4)  # let the worker finish what the beats sent
    finally:
        stop([*beats, worker])
    runs = list(ChargeRun.objects.values_list("charge_date", "charged", "already_charged"))
    per_day = Counter(day for day, _, _ in runs)
    charges = Counter(DailyCharge.objects.values_list("subscription_id", "charge_date"))
    return {
        "days": len(per_day),
        "runs": len(runs),
        "most runs in a day": max(per_day.values(), default=0),
        "charges": sum(charges.values()),
        "refused by the constraint": sum(already for _, _, already in runs),
        "most charges of one subscription in a day": max(charges.values(), default=0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=24.0)
    args = parser.parse_args(argv)
    admin_url = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    env = {
        **os.environ,
        "BILLING_DATABASE_URL": create_database(admin_url),
        "DJANGO_SETTINGS_MODULE": "billing_site.settings",
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
    }
    os.environ.update({k: env[k] for k in ("BILLING_DATABASE_URL", "DJANGO_SETTINGS_MODULE")})
    sys.path[:0] = [str(HERE), str(ROOT)]
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=HERE, env=env, check=True
    )

    import django

    django.setup()
    from charges.models import Subscription
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    for customer, price in [("ada", 900), ("grace", 1900), ("linus", 4900)]:
        Subscription.objects.create(customer=customer, price_cents=price)
    every = IntervalSchedule.objects.create(every=4, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(name="daily-charge", task="charges.charge_daily", interval=every)

    results = {name: run_phase(name, env, args.seconds) for name in SCHEDULERS}
    rows = list(next(iter(results.values())))
    print(f"\n{'':45}" + "".join(f"{name:>14}" for name in results))
    for row in rows:
        print(f"{row:45}" + "".join(f"{results[name][row]!s:>14}" for name in results))
    safe = results["safebeat"]
    ok = (
        safe["runs"] == safe["days"]
        and safe["refused by the constraint"] == 0
        and safe["most charges of one subscription in a day"] == 1
    )
    print(
        "\nsafebeat ran the charge once per billing day."
        if ok
        else "\nsafebeat ran the charge more than once for a day: see .demo/django_billing/"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
