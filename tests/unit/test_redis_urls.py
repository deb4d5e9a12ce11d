"""Redis store URLs and the eviction rule: parsed without a server, errors that name the culprit."""

from __future__ import annotations

import pytest
import redis
import redis.cluster

from safebeat.errors import ConfigError
from safebeat.store_urls import backend_of, redact
from safebeat.stores.redis.checks import eviction_hazard
from safebeat.stores.redis.connection import Timeouts, connect

TIMEOUTS = Timeouts(connect=1, reply=1)


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost/0",
        "rediss://cache:6380/1",
        "unix:///run/redis.sock?db=2",
        "redis+sentinel://h1:26379,h2:26379/mymaster/0",
        "rediss+sentinel://h1/mymaster",
        "redis+cluster://h1:7000,h2:7001",
        "rediss+cluster://h1:7000",
    ],
)
def test_every_redis_scheme_selects_the_redis_store(url: str) -> None:
    """Single server, TLS, Unix socket, Sentinel and Cluster URLs all pick the Redis backend."""
    assert backend_of(url) == "redis"


def test_single_server_url_keeps_user_password_database_and_tls() -> None:
    """redis-py reads user, password, database and TLS from a single-server URL."""
    client = connect("rediss://beat:s3cret@cache.internal:6380/3", TIMEOUTS)
    assert isinstance(client, redis.Redis)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["db"]) == ("beat", "s3cret", 3)
    assert (kwargs["host"], kwargs["port"]) == ("cache.internal", 6380)
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    assert kwargs["socket_timeout"] == 1


def test_sentinel_url_names_the_service_database_and_sentinels() -> None:
    """A Sentinel URL lists every Sentinel, the master's service name and database."""
    client = connect(
        "redis+sentinel://beat:pw@s1:26379,[::1]:26380,s3/mymaster/2?sentinel_password=x",
        TIMEOUTS,
    )
    pool = client.connection_pool
    assert pool.service_name == "mymaster"
    assert pool.connection_kwargs["db"] == 2
    assert pool.connection_kwargs["password"] == "pw"
    sentinels = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in pool.sentinel_manager.sentinels
    ]
    assert sentinels == [("s1", 26379), ("::1", 26380), ("s3", 26379)]
    assert pool.sentinel_manager.sentinels[0].connection_pool.connection_kwargs["password"] == "x"


@pytest.mark.parametrize(
    ("url", "culprit"),
    [
        ("redis+sentinel://s1:26379", "service"),
        ("redis+sentinel://s1:26379/mymaster/zero", "service"),
        ("redis+sentinel://s1:26379/mymaster?master_password=x", "unknown option"),
        ("redis+sentinel://s1:notaport/mymaster", "bad host:port 's1:notaport'"),
        ("redis+sentinel:///mymaster", "no host"),
        ("redis+cluster://h1:7000/0", "no databases"),
        ("redis+cluster://h1:99999", "bad host:port 'h1:99999'"),
    ],
)
def test_malformed_multi_host_urls_are_config_errors_naming_the_problem(
    url: str, culprit: str
) -> None:
    """A bad Sentinel or Cluster URL raises ConfigError that says what is wrong."""
    with pytest.raises(ConfigError, match="safebeat_url") as caught:
        connect(url, TIMEOUTS)
    assert culprit in str(caught.value)


def test_multi_host_urls_are_shown_without_passwords() -> None:
    """Banners and errors hide the master's and the Sentinels' passwords."""
    shown = redact("redis+sentinel://beat:pw1@s1:26379,s2:26379/mymaster?sentinel_password=pw2")
    assert "pw1" not in shown
    assert "pw2" not in shown
    assert shown.startswith("redis+sentinel://beat:***@s1:26379,s2:26379/mymaster")


@pytest.mark.parametrize(
    ("policy", "dangerous"),
    [
        ("noeviction", False),
        ("volatile-lru", False),
        ("volatile-ttl", False),
        ("allkeys-lru", True),
        ("allkeys-lfu", True),
        ("allkeys-random", True),
    ],
)
def test_only_allkeys_policies_can_evict_claims(policy: str, dangerous: bool) -> None:
    """Claims have no TTL, so only allkeys-* eviction can delete them."""
    hazard = eviction_hazard(policy, 1 << 30)
    assert (hazard is not None) is dangerous
    if hazard:
        assert policy in hazard
        assert "noeviction" in hazard
