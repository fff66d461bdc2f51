"""Service settings come from a prefixed environment, typed and validated; logs never carry secrets."""

import io
import json
import logging
from typing import ClassVar

import pytest

from gpuaware.runtime.logs import JsonFormatter, scrub, setup_logging
from gpuaware.runtime.settings import DatabaseSettings, ServiceSettings, SettingsError, redact_url


class PlacementSettings(ServiceSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_PLACEMENT_"
    batch_size: int = 64
    leader_lease_s: float = 5.0
    dry_run: bool = False


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # nothing set: every default
        ({}, {"batch_size": 64, "leader_lease_s": 5.0, "dry_run": False, "nats_url": "nats://127.0.0.1:4222"}),
        # prefixed strings are converted to the declared types
        ({"GPUAWARE_PLACEMENT_BATCH_SIZE": "128", "GPUAWARE_PLACEMENT_DRY_RUN": "true",
          "GPUAWARE_PLACEMENT_LEADER_LEASE_S": "2.5"}, {"batch_size": 128, "dry_run": True, "leader_lease_s": 2.5}),
        # unprefixed NATS_URL is the launcher's fallback; the prefixed one wins over it
        ({"NATS_URL": "nats://a:1"}, {"nats_url": "nats://a:1"}),
        ({"NATS_URL": "nats://a:1", "GPUAWARE_PLACEMENT_NATS_URL": "nats://b:2"}, {"nats_url": "nats://b:2"}),
        # another service's prefix is ignored
        ({"GPUAWARE_QUOTA_BATCH_SIZE": "9"}, {"batch_size": 64}),
    ],
)
def test_from_env(env: dict[str, str], expected: dict[str, object]) -> None:
    settings = PlacementSettings.from_env(env)
    for key, value in expected.items():
        assert getattr(settings, key) == value


def test_bad_value_names_the_field() -> None:
    with pytest.raises(SettingsError, match="batch_size"):
        PlacementSettings.from_env({"GPUAWARE_PLACEMENT_BATCH_SIZE": "many"})


class QueueSettings(DatabaseSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_QUEUE_"
    pool_size: int = 4  # a service may give the shared field its own default
    report_s: float = 10.0

    def __post_init__(self) -> None:
        self.require_positive("report_s", "db_timeout_s")


def test_database_settings_share_the_pool_fields_under_each_prefix() -> None:
    s = QueueSettings.from_env({"GPUAWARE_QUEUE_DB_TIMEOUT_S": "1.5", "DATABASE_URL": "postgresql://h/db"})
    assert (s.pool_size, s.db_timeout_s, s.database_url) == (4, 1.5, "postgresql://h/db")
    assert s.database_variable == "GPUAWARE_QUEUE_DATABASE_URL"


@pytest.mark.parametrize("name", ["REPORT_S", "DB_TIMEOUT_S"])
def test_require_positive_names_the_variable(name: str) -> None:
    with pytest.raises(SettingsError, match=f"GPUAWARE_QUEUE_{name} must be positive"):
        QueueSettings.from_env({f"GPUAWARE_QUEUE_{name}": "0"})


def test_settings_are_frozen() -> None:
    settings = PlacementSettings.from_env({})
    with pytest.raises(AttributeError):
        settings.batch_size = 1  # type: ignore[misc]  # the write the test expects to fail


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://svc:s3cret@db:5432/gpuaware", "postgresql://svc:***@db:5432/gpuaware"),
        ("postgresql://svc@db/gpuaware", "postgresql://svc@db/gpuaware"),  # no password: unchanged
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert scrub(f"connecting to {url}") == f"connecting to {expected}"


def test_redacted_settings_hide_passwords() -> None:
    settings = PlacementSettings.from_env({"DATABASE_URL": "postgresql://u:pw@h/db"})
    assert settings.redacted()["database_url"] == "postgresql://u:***@h/db"


def test_json_log_line_is_structured_and_scrubbed() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("placement"))
    log = logging.getLogger("test.json")
    log.addHandler(handler)
    log.propagate = False
    log.warning("lost connection to %s", "postgresql://u:hunter2@db/x", extra={"attempt": 3})
    entry = json.loads(stream.getvalue())
    assert entry["service"] == "placement" and entry["level"] == "warning" and entry["attempt"] == 3
    assert "hunter2" not in stream.getvalue()


@pytest.mark.parametrize(
    ("env", "user", "password"),
    [
        ({}, "", ""),
        # the launcher's unprefixed fallbacks, as for NATS_URL
        ({"NATS_USER": "placement", "NATS_PASSWORD": "pw1"}, "placement", "pw1"),
        # the prefixed ones win
        ({"NATS_USER": "x", "NATS_PASSWORD": "y", "GPUAWARE_PLACEMENT_NATS_USER": "placement",
          "GPUAWARE_PLACEMENT_NATS_PASSWORD": "pw2"}, "placement", "pw2"),
    ],
)
def test_nats_user_and_password_from_env(env: dict[str, str], user: str, password: str) -> None:
    settings = PlacementSettings.from_env(env)
    assert (settings.nats_user, settings.nats_password) == (user, password)


def test_nats_password_never_reaches_a_log_line() -> None:
    secret = "Zq8-not-a-url-secret"
    settings = PlacementSettings.from_env({"NATS_USER": "placement", "NATS_PASSWORD": secret})
    redacted = settings.redacted()
    assert redacted["nats_password"] == "***" and redacted["nats_user"] == "placement"
    assert PlacementSettings.from_env({}).redacted()["nats_password"] == ""  # unset stays visibly unset
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("placement"))
    log = logging.getLogger("test.json.password")
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    log.propagate = False
    # what run_service logs at start
    log.info("starting %s %s", "placement", "0.1.0", extra={"settings": redacted})
    line = stream.getvalue()
    assert secret not in line
    assert json.loads(line)["settings"]["nats_password"] == "***"


def test_log_lines_go_to_the_standard_error_of_the_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command run in-process swaps standard error and closes its own afterwards: later lines go to the
    stream of the moment, never to the closed one (a 'Logging error' traceback)."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    first, second = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr("sys.stderr", first)
        setup_logging("t", "INFO", "json")
        logging.getLogger("x").info("one")
        first.close()
        monkeypatch.setattr("sys.stderr", second)
        logging.getLogger("x").info("two")
        assert json.loads(second.getvalue())["msg"] == "two"
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
