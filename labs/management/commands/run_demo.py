"""``make demo``: the whole embedded portal in one terminal; Ctrl-C stops everything it started."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from labs.domain.reasons import Reason
from labs.drivers import get_driver
from labs.services.controller import sessions_shutdown
from labs.services.demo import DEMO_AGENT_PORT, DEMO_NODE, DEMO_PASSWORD, demo_data_load


class Command(BaseCommand):
    help = "Migrate, load demo data, start Redis if needed, then web + worker + beat until Ctrl-C."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default=os.environ.get("PORTAL_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORTAL_PORT", "8000")))

    def handle(self, *args, host: str, port: int, **options) -> None:
        self.children: list[tuple[str, subprocess.Popen]] = []
        self.stopping = False
        Path(settings.VAR_DIR).mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        try:
            self._ensure_redis()
            call_command("migrate", interactive=False, verbosity=0)
            demo_data_load()
            call_command("collectstatic", interactive=False, verbosity=0)
            python = sys.executable
            celery = [python, "-m", "celery", "-A", "portal"]
            # One simulated node agent for the demo node: the portal registers each session's
            # instance with it and the reconciler diffs it against the ledger.
            self._start(
                "agent",
                [python, "-m", "labs.agent", "--driver", "simulated", "--node", DEMO_NODE, "--port", str(DEMO_AGENT_PORT)],
            )
            self._start("web", [python, "-m", "daphne", "-b", host, "-p", str(port), "portal.asgi:application"])
            self._start(
                "worker",
                [
                    *celery,
                    "worker",
                    "--loglevel",
                    "INFO",
                    "--concurrency",
                    "2",
                    "--hostname",
                    "demo@%h",
                    "--without-gossip",
                    "--without-mingle",
                ],
            )
            self._start(
                "beat", [*celery, "beat", "--loglevel", "INFO", "--schedule", str(Path(settings.VAR_DIR) / "celerybeat-schedule")]
            )
            self.stdout.write(
                self.style.SUCCESS(f"\nNPU Lab Portal is running at http://{host}:{port}/\n")
                + f"  student:    student001 .. student128 / {DEMO_PASSWORD}\n"
                + f"  instructor: instructor / {DEMO_PASSWORD}\n"
                + f"  admin:      admin / {DEMO_PASSWORD}   (http://{host}:{port}/admin/)\n"
                + f"  cluster driver: {settings.LAB_DRIVER['BACKEND']}; node agent (simulated) on port {DEMO_AGENT_PORT}\n"
                + "  reconciler events: .venv/bin/python manage.py repairs\n"
                + "Press Ctrl-C to stop everything.\n"
            )
            while not self.stopping:
                for name, process in self.children:
                    if process.poll() is not None:
                        raise CommandError(f"{name} exited with code {process.returncode}; stopping the demo.")
                time.sleep(0.5)
        finally:
            self._shutdown()

    def _on_signal(self, signum, frame) -> None:
        self.stopping = True

    def _ensure_redis(self) -> None:
        url = settings.REDIS_URL
        try:
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
            return
        except redis.RedisError:
            pass
        parts = urlsplit(url)
        if parts.hostname not in {"127.0.0.1", "localhost", "::1"}:
            raise CommandError("Redis does not answer at REDIS_URL and it is not local, so the demo cannot start it.")
        server = shutil.which("redis-server")
        if server is None:
            raise CommandError(
                "Redis does not answer at REDIS_URL and redis-server is not installed (apt-get install redis-server)."
            )
        self.stdout.write(f"starting redis-server on port {parts.port or 6379}")
        self._start(
            "redis",
            [
                server,
                "--bind",
                "127.0.0.1",
                "--port",
                str(parts.port or 6379),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(settings.VAR_DIR),
            ],
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                redis.Redis.from_url(url, socket_connect_timeout=1).ping()
                return
            except redis.RedisError:
                time.sleep(0.1)
        raise CommandError("redis-server did not answer within 10 s.")

    def _start(self, name: str, command: list[str]) -> None:
        # Own process group: the terminal's Ctrl-C reaches only this command, which then
        # stops the sessions first and the services after, in order.
        process = subprocess.Popen(command, start_new_session=True, cwd=settings.BASE_DIR)
        self.children.append((name, process))

    def _shutdown(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if any(name == "web" for name, _ in self.children):
            self.stdout.write("\nstopping lab sessions ...")
            try:
                ended = sessions_shutdown(reason=Reason.of("session.portal_shutdown"))
                get_driver().shutdown()
                self.stdout.write(f"stopped {ended} session(s)")
            except Exception as exc:  # keep going: the services must still be stopped
                self.stderr.write(f"could not stop every session: {exc}")
        for _name, process in reversed(self.children):
            if process.poll() is None:
                # The service's main process only: celery and daphne stop their own children
                # in order (a signal to the whole group kills pool children mid-task).
                process.terminate()
        deadline = time.monotonic() + 15
        for name, process in reversed(self.children):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            self.stdout.write(f"{name} stopped")
