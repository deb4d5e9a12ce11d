"""Settings and environment variables become one frozen, validated Config."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from celery import Celery

from safebeat.config import DEFAULT_URL, Config, config_from_app, load_config, parse_duration
from safebeat.errors import ConfigError
from safebeat.windows import Misfire, Policy


def test_defaults_match_the_documented_table() -> None:
    """With nothing set, every setting has the default the docs promise."""
    config = load_config({}, app_main="proj", environ={})
    assert config == Config(namespace="proj")
    assert config.url == DEFAULT_URL == "sqlite:///safebeat.sqlite3"
    assert config.policy == Policy(Misfire.LATEST, None, 100)
    assert config.claim_timeout == timedelta(seconds=30)
    assert config.retention == timedelta(days=30)
    assert config.metrics_port is None
    assert config.auto_migrate is True


def test_namespace_defaults_to_the_app_name_and_never_to_main() -> None:
    """The namespace is the Celery app's main name; a script's `__main__` becomes `default`."""
    assert load_config({}, app_main="billing", environ={}).namespace == "billing"
    assert load_config({}, app_main="__main__", environ={}).namespace == "default"
    assert load_config({}, app_main=None, environ={}).namespace == "default"


def test_environment_overrides_celery_settings() -> None:
    """SAFEBEAT_* variables win over app.conf, and the source of each value is recorded."""
    config = load_config(
        {"safebeat_url": "sqlite:///a.db", "safebeat_misfire": "all"},
        environ={"SAFEBEAT_URL": "postgresql://db/app", "SAFEBEAT_GRACE": "5m"},
    )
    assert config.url == "postgresql://db/app"
    assert config.misfire is Misfire.ALL
    assert config.grace == timedelta(minutes=5)
    assert config.sources == {
        "url": "$SAFEBEAT_URL",
        "misfire": "safebeat_misfire",
        "grace": "$SAFEBEAT_GRACE",
    }


def test_django_namespaced_settings_are_read() -> None:
    """With `namespace='CELERY'`, CELERY_SAFEBEAT_URL configures safebeat_url."""

    class Settings:
        CELERY_SAFEBEAT_URL = "postgresql://db/app"
        CELERY_SAFEBEAT_CLAIM_TIMEOUT = 45

    app = Celery("proj", set_as_current=False)
    app.config_from_object(Settings, namespace="CELERY")
    config = config_from_app(app, environ={})
    assert config.url == "postgresql://db/app"
    assert config.claim_timeout == timedelta(seconds=45)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (30, 30),
        (1.5, 1.5),
        ("30", 30),
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("30d", 2592000),
        ("250ms", 0.25),
        (timedelta(minutes=1), 60),
    ],
)
def test_durations_accept_numbers_text_and_timedeltas(value: object, seconds: float) -> None:
    """Durations may be seconds, a timedelta, or text with a unit."""
    assert parse_duration(value, "safebeat_grace") == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"safebeat_misfire": "sometimes"}, "safebeat_misfire='sometimes': expected one of"),
        ({"safebeat_grace": "soon"}, "safebeat_grace='soon'"),
        ({"safebeat_claim_timeout": 0}, "safebeat_claim_timeout=0: must be greater than zero"),
        ({"safebeat_catchup_limit": 0}, "safebeat_catchup_limit=0"),
        ({"safebeat_metrics_port": 70000}, "at most 65535"),
        ({"safebeat_auto_migrate": "perhaps"}, "expected true or false"),
        ({"safebeat_url": "mysql://db/app"}, "unknown scheme 'mysql'"),
        ({"safebeat_retention": -1}, "must not be negative"),
    ],
)
def test_bad_values_name_the_setting(conf: dict[str, object], message: str) -> None:
    """A bad value is a ConfigError that names the setting and says what is expected."""
    with pytest.raises(ConfigError) as caught:
        load_config(conf, environ={})
    assert message in str(caught.value)


def test_unknown_setting_is_an_error_with_a_suggestion() -> None:
    """A misspelt safebeat setting fails startup, naming it and the likely intended one."""
    with pytest.raises(
        ConfigError, match=r"'safebeat_retension'.*did you mean 'safebeat_retention'"
    ):
        load_config({"safebeat_retension": "7d"}, environ={})


def test_unknown_environment_variable_warns_but_kubernetes_service_vars_are_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A typo in SAFEBEAT_* is logged; Kubernetes' SAFEBEAT_SERVICE_HOST and friends are not."""
    environ = {
        "SAFEBEAT_URLL": "x",
        "SAFEBEAT_SERVICE_HOST": "10.0.0.1",
        "SAFEBEAT_PORT_9100_TCP": "tcp://10.0.0.1:9100",
        "SAFEBEAT_TEST_POSTGRES_URL": "postgresql://x",
        "SAFEBEAT_METRICS_PORT": "tcp://10.96.0.7:9100",  # a Service named safebeat-metrics
    }
    with caplog.at_level(logging.WARNING, "safebeat"):
        config = load_config({}, environ=environ)
    assert config.url == DEFAULT_URL
    assert config.metrics_port is None
    assert "service link" in caplog.text
    assert "SAFEBEAT_URLL" in caplog.text
    assert "SERVICE_HOST" not in caplog.text
    assert "SAFEBEAT_PORT_9100_TCP" not in caplog.text
    assert "TEST_POSTGRES" not in caplog.text


def test_a_mistyped_variable_is_corrected_to_the_variable_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A typo in the environment suggests SAFEBEAT_URL, the variable, not the setting's key."""
    with caplog.at_level(logging.WARNING, "safebeat"):
        load_config({}, environ={"SAFEBEAT_URLL": "x"})
    assert "did you mean 'SAFEBEAT_URL'?" in caplog.text
    assert "safebeat_url" not in caplog.text


def test_safebeat_debug_is_the_command_line_switch_not_a_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SAFEBEAT_DEBUG (show tracebacks in the CLI) is not reported as an unknown setting."""
    with caplog.at_level(logging.WARNING, "safebeat"):
        load_config({}, environ={"SAFEBEAT_DEBUG": "1"})
    assert caplog.text == ""


def test_the_web_consoles_variables_are_its_options_not_unknown_settings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every SAFEBEAT_WEB_* variable `safebeat web` reads (token, user, password, read-only,
    allowed hosts, token actor) is known: no command warns of an unknown setting."""
    from safebeat.cli.web import web

    variables = {
        var
        for param in web.params
        for var in ([param.envvar] if isinstance(param.envvar, str) else param.envvar or [])
        if var.startswith("SAFEBEAT_WEB_")
    }
    assert {"SAFEBEAT_WEB_TOKEN", "SAFEBEAT_WEB_ALLOWED_HOSTS"} <= variables
    with caplog.at_level(logging.WARNING, "safebeat"):
        config = load_config({}, environ=dict.fromkeys(variables, "1"))
    assert caplog.text == ""
    assert config == load_config({}, environ={})


def test_config_is_frozen() -> None:
    """The config cannot change after startup."""
    config = load_config({}, environ={})
    with pytest.raises(AttributeError):
        config.url = "sqlite:///other.db"  # type: ignore[misc]
