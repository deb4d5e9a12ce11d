"""The end-of-run sweep: it removes what carries a run's tag, keeps everything else, and
names Redis keys that appeared without any run's tag. Each test sweeps a made-up run on a
server or database of its own, never the run that executes it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
import redis

from tests import runscope, services

OTHER_RUN = "sbt0123abcd"  # a run going on at the same time


@pytest.fixture
def own_redis() -> Iterator[services.RedisServer]:
    server = services.start_redis_server()
    yield server
    server.stop()


@pytest.mark.redis
def test_redis_sweep_deletes_the_runs_keys_and_names_the_untagged_ones(
    own_redis: services.RedisServer,
) -> None:
    """The run's keys go; keys there before, another run's and server-wide ones stay; a new
    key without a tag is reported, and is all that is."""
    run = "sbtfeedf00d"
    client = redis.Redis.from_url(own_redis.url)
    client.set("someone-elses-app:config", "1")
    watch = runscope.RedisWatch.start(own_redis.url, run)
    ours = [f"safebeat:{{{run}-1a2b}}:anchor", f"_kombu.binding.q-{run}-9f8e", f"q-{run}-9f8e"]
    for key in ours:
        client.set(key, "x")
    client.set(f"safebeat:{{{OTHER_RUN}-77}}:anchor", "x")
    client.set("DROP TABLE safebeat_dispatch;", "x")  # a test that escaped its names
    client.set("safebeat:layout", "1")  # what every Redis store writes, whoever runs it
    watch.finish()
    assert watch.removed == len(ours)
    assert watch.escaped == [b"DROP TABLE safebeat_dispatch;"]
    assert watch.server_wide == [b"safebeat:layout"]
    assert sorted(client.keys()) == [
        b"DROP TABLE safebeat_dispatch;",
        b"safebeat:layout",
        f"safebeat:{{{OTHER_RUN}-77}}:anchor".encode(),
        b"someone-elses-app:config",
    ]
    client.close()


@pytest.mark.postgres
def test_postgres_sweep_drops_the_runs_databases_only(pg_admin_url: str) -> None:
    """Databases named `safebeat_<run>_…` are dropped, also while a session holds one;
    another run's database is left alone."""
    # Made-up runs of this test's own: the server is shared with other test runs, which
    # execute this test too, and would otherwise create and drop the same databases.
    run, other_run = (f"sbt{uuid.uuid4().hex[:8]}" for _ in range(2))
    mine = services.create_database(pg_admin_url, f"safebeat_{run}_test_gw7")
    other = f"safebeat_{other_run}_test_gw0"
    services.create_database(pg_admin_url, other)
    try:
        with psycopg.connect(mine):  # an interrupted worker's session, still open
            dropped = runscope.drop_postgres_databases(pg_admin_url, run)
        assert dropped == [f"safebeat_{run}_test_gw7"]
        with psycopg.connect(pg_admin_url) as conn:
            left = {
                name
                for (name,) in conn.execute(
                    "SELECT datname FROM pg_database WHERE datname = ANY(%s)",
                    [[f"safebeat_{run}_test_gw7", other]],
                )
            }
        assert left == {other}
    finally:
        services.drop_database(pg_admin_url, other)
        services.drop_database(pg_admin_url, f"safebeat_{run}_test_gw7")
