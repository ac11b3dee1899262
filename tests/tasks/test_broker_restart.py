"""A worker whose Redis broker restarts is back on it within about a second."""

import shutil
import socket
import subprocess
import time

import pytest

from tests.conftest import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port: int, tmp_path) -> subprocess.Popen:
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, timeout=10, message="redis-server listening")
    return process


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_a_worker_reconnects_promptly_when_its_broker_comes_back(world, start_worker, tmp_path):
    port = free_port()
    redis = start_redis(port, tmp_path)
    broker = f"redis://127.0.0.1:{port}/0"
    worker = start_worker(CELERY_BROKER_URL=broker, REDIS_URL=broker)
    try:
        wait_for(lambda: " ready." in worker.output(), timeout=60, message="worker ready")
        redis.kill()
        redis.wait()
        wait_for(lambda: "Trying again" in worker.output(), timeout=15, message=lambda: worker.output()[-2000:])
        time.sleep(3.0)  # down long enough that Celery's own schedule would wait 4 s, then 6 s
        redis = start_redis(port, tmp_path)
        back = time.monotonic()
        wait_for(lambda: worker.output().count("Connected to redis") >= 2, timeout=10, message=lambda: worker.output()[-2000:])
        # Celery's defaults (2, 4, 6 … s) would leave it away for up to 4 s more; this consumer at most 2 s.
        assert time.monotonic() - back < 2.5
    finally:
        redis.kill()
        redis.wait()
