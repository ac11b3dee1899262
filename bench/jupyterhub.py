"""The same class start on JupyterHub, for a side-by-side figure: K users start a server at once.

    .venv/bin/python -m bench.jupyterhub --launches 128
    .venv/bin/python -m bench.jupyterhub --launches 128 --driver kubernetes

Installs, once, into a cache directory outside the repository (~/.cache/npu-lab-bench/, or
$NPU_LAB_BENCH_CACHE): JupyterHub from PyPI (pinned, in a virtualenv of its own so the project's
pins are untouched) and configurable-http-proxy from the npm registry (pinned, npm install
--prefix), with the PostgreSQL driver the project pins (psycopg). Then, per run, in a temp dir: a
jupyterhub_config.py, the cookie secret and the logs; the Hub, its proxy and a stub "notebook"
server on free ports on 127.0.0.1. The Hub's database is, as JupyterHub's documentation recommends
for production, PostgreSQL: a database (and login role) of its own, bench_jupyterhub_<run>, made
on the PostgreSQL at 127.0.0.1:5432 the portal's bench uses and dropped at the end (db_url
postgresql+psycopg://...); --hub-db sqlite gives it its default, a SQLite file in the temp dir,
to show what that costs (each commit an fsync on the Hub's one event loop).

--driver simulator (the default): the spawner (OneSecondSpawner, written into the config) is the
counterpart of the portal's simulator driver: no process is started per user. Its start() waits
--start-delay seconds (asyncio.sleep, 1 s by default: the "pod" coming up) and returns the URL of
one shared tiny HTTP server (a ThreadingHTTPServer in its own process answering 200 and
X-JupyterHub-Version to any path). Everything else is JupyterHub's own spawn path: the API handler and its spawn-limit check,
the server's API token, Spawner.start, the Hub's HTTP check that the server is up (a real request
to the stub), adding the user's route to configurable-http-proxy over its REST API, the database
writes. Like KubeSpawner, start() returns only once the "pod" is up.

--driver kubernetes: KubeSpawner (PyPI jupyterhub-kubespawner, pinned, installed once into the
same cached virtualenv; kubernetes_asyncio pinned too) against a fresh labs.devcluster started by
the run in its temp dir: the real kube-apiserver, kube-scheduler (profile "volcano") and
kube-controller-manager from `make controlplane`, with ceil(K / 128) fake FlexNPU nodes (8 cards
each) named npu-001, npu-002, ... as bench.classstart names its servers, whose simulated kubelet
runs a bound pod --start-delay seconds after it is bound. The simulator gives every pod the podIP
127.0.0.1 and KubeSpawner's port is the stub's, so the URL KubeSpawner returns
(http://<podIP>:<port>) is the stub's and the Hub's HTTP check is the same request as above.
KubeSpawner's one profile ("small") asks for what the portal's pod asks for with bench.classstart's
"small" template (5 % of a card, 4 GiB) on the flexnpu device profile -- computed here by the
portal's own builders (labs.drivers.kubernetes: host_resources, FlexNPUProfile.render): the same
CPU, memory and scratch-disk requests and limits and volcano.sh/flexnpu-{num,core.percentage,
memory.128mi}, with schedulerName volcano and a node selector for FlexNPU nodes; the run checks a
created pod against them. No node pin (the portal's ledger picks a node; KubeSpawner leaves it to
the scheduler) and no storage (no PVC). The image is never pulled (any name does).

Credentials, least privilege: the Hub's pods live in a namespace of their own ("jupyterhub"); a
ServiceAccount there is bound to a Role allowing what KubeSpawner does here (pods: get, list,
watch, create, delete; events: get, list, watch), and the Hub gets a kubeconfig with that
account's token (TokenRequest API) and the cluster's CA (KUBECONFIG). After all servers run, the
bench stops them through the Hub's API (DELETE .../server; KubeSpawner deletes each pod and waits
for it to go), then counts what is left in the namespace (pods, services, secrets, PVCs: 0
expected). The Hub's own cleanup_servers is off: the dev cluster is torn down at the end anyway
and a Hub killed mid-cleanup would only slow the teardown. Printed as well: the time to all
stopped.

Settings: DummyAuthenticator, concurrent_spawn_limit = 0 (no limit; --default-spawn-limit keeps
JupyterHub's default of 100), active_server_limit = 0, slow_spawn_timeout = 0 (the POST answers
202 at once instead of holding the request up to 10 s, as for any slow spawner; the portal's
POST answers at once too; slow_stop_timeout = 0 likewise for the stops), an admin user
(bench-admin, with a password of the run's), api_page_default_limit and api_page_max_limit 500
(the portal's API pages 500 at most). No token is written in the config: the bench asks the Hub for one once (POST
/hub/api/users/bench-admin/tokens, logged in by the request's "auth" field) and uses it for every
request. A token the Hub made is checked with one SHA-512 round; one from the config file is a
secret the Hub did not choose, checked with 16,384 rounds on every request.

The run: create K users with one POST /hub/api/users, then K POST /hub/api/users/{name}/server
queued at once on a pool of --threads threads (through the proxy, as a browser would), then
the users are read through the proxy, GET /hub/api/users?offset=..&limit=500 page by page, every
--poll-period s (0.1) until every server is ready or --timeout seconds have passed: exactly as
bench.classstart reads the portal's sessions through its API (bench/poll.py). A 429 (spawn
limit) is retried after its Retry-After, as a user would press again.
Printed as for bench.classstart: time spent submitting, HTTP statuses (429s counted), time from
the first POST to the last server ready, p50/p99 of launch -> ready per user. A user's ready time
is when the poll that first showed it ready returned (up to ~0.1 s plus the poll's own duration
late). Beside the result: the load average before and after the run, and the median time of
a small write + fsync in the run's temp dir just before the result (bench/poll.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.harness import (
    POSTGRES_SERVER_URL,
    ROOT,
    Fired,
    Resources,
    fire_at_once,
    fmt_seconds,
    free_port,
    http_request,
    new_token,
    percentile,
    postgres_create_database,
    postgres_drop_database,
    raise_keyboard_interrupt_on_sigterm,
    retry_until_accepted,
    run_id,
    status_counts,
    wait_until,
    write_json,
)
from bench.poll import PAGE_SIZE, POLL_PERIOD, PollFailed, fmt_machine, fmt_polling, hub_fetch, machine_state, poll_until_running

JUPYTERHUB_VERSION = "6.1.1"
CHP_VERSION = "5.3.0"
KUBESPAWNER_VERSION = "7.1.0"  # needs JupyterHub >= 4
KUBERNETES_ASYNCIO_VERSION = "36.1.0"  # KubeSpawner's API client
DRIVERS = ("simulator", "kubernetes")
HUB_DATABASES = ("postgresql", "sqlite")
HUB_DB_CONNECTIONS = 20  # the Hub's SQLAlchemy pool is 5 + 10 overflow
ADMIN = "bench-admin"  # the Hub's admin user, whose token (issued by the Hub) the bench uses
CACHE = Path(os.environ.get("NPU_LAB_BENCH_CACHE", Path.home() / ".cache" / "npu-lab-bench"))

STUB_SERVER = """\
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, VERSION = int(sys.argv[1]), sys.argv[2]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"stub single-user server\\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-JupyterHub-Version", VERSION)
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
"""

CONFIG = """\
c = get_config()  # noqa: F821
c.JupyterHub.bind_url = "http://127.0.0.1:{proxy_port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.ConfigurableHTTPProxy.auth_token = {proxy_token!r}
c.ConfigurableHTTPProxy.pid_file = {proxy_pid!r}
c.JupyterHub.db_url = {db_url!r}
c.JupyterHub.cookie_secret_file = {cookie_secret!r}
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {admin_password!r}
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{{admin!r}}}
c.JupyterHub.concurrent_spawn_limit = {spawn_limit!r}
c.JupyterHub.active_server_limit = 0
c.JupyterHub.api_page_default_limit = {page_size!r}
c.JupyterHub.api_page_max_limit = {page_size!r}
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0, "slow_stop_timeout": 0}}
"""

SIMULATOR_SPAWNER = """\
import asyncio

from jupyterhub.spawner import Spawner
from traitlets import Float, Unicode


class OneSecondSpawner(Spawner):
    \"\"\"A server that "starts" in start_delay seconds: the shared stub server, after a sleep.\"\"\"

    start_delay = Float(1.0).tag(config=True)
    server_url = Unicode().tag(config=True)
    _running = False

    async def start(self):
        await asyncio.sleep(self.start_delay)
        self._running = True
        return self.server_url

    async def poll(self):
        return None if self._running else 0

    async def stop(self, now=False):
        self._running = False


c.JupyterHub.spawner_class = OneSecondSpawner
c.OneSecondSpawner.start_delay = {start_delay!r}
c.OneSecondSpawner.server_url = "http://127.0.0.1:{stub_port}"
"""

KUBESPAWNER = """\
c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.JupyterHub.cleanup_servers = False
c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.image = {image!r}
c.KubeSpawner.scheduler_name = "volcano"
c.KubeSpawner.node_selector = {node_selector!r}
# Every pod's podIP is 127.0.0.1 (the node simulator's pod_ip): with the stub's port, the URL
# KubeSpawner returns, http://<podIP>:<port>, is the stub server's.
c.KubeSpawner.port = {stub_port!r}
c.KubeSpawner.storage_pvc_ensure = False
c.KubeSpawner.start_timeout = {timeout!r}
c.KubeSpawner.http_timeout = {timeout!r}
c.KubeSpawner.k8s_api_request_timeout = 30
c.KubeSpawner.k8s_api_request_retry_timeout = {timeout!r}
c.KubeSpawner.profile_list = {profile_list!r}
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.jupyterhub", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=128, help="users starting a server at once (K), default 128")
    parser.add_argument(
        "--driver",
        choices=DRIVERS,
        default="simulator",
        help="simulator: a spawner that sleeps (default); kubernetes: KubeSpawner on a fresh labs.devcluster",
    )
    parser.add_argument(
        "--start-delay",
        type=float,
        default=1.0,
        help="seconds a server takes to start (the spawner's sleep, or the node simulator's delay), default 1.0",
    )
    parser.add_argument("--threads", type=int, default=32, help="client threads sending the requests, default 32")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds from the first request to give up, default 180")
    parser.add_argument(
        "--default-spawn-limit",
        action="store_true",
        help="keep JupyterHub's default concurrent_spawn_limit (100) instead of 0, to count its 429s",
    )
    parser.add_argument(
        "--hub-db",
        choices=HUB_DATABASES,
        default="postgresql",
        help="the Hub's database: a database of its own on the PostgreSQL at 127.0.0.1:5432 (default; what JupyterHub's "
        "documentation recommends for production), or sqlite (the Hub's default: a file in the run's temp dir)",
    )
    parser.add_argument(
        "--poll-period", type=float, default=POLL_PERIOD, help=f"seconds between polls of the users, default {POLL_PERIOD:g}"
    )
    parser.add_argument("--no-retry", action="store_true", help="do not retry a 429 after its Retry-After")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temp dir with the config and logs")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH (used by bench.side_by_side)")
    parser.add_argument("--install-only", action="store_true", help="install JupyterHub and the proxy into the cache, then exit")
    args = parser.parse_args(argv)
    if args.launches < 1 or args.threads < 1:
        parser.error("--launches and --threads must be >= 1")
    if args.start_delay < 0 or args.timeout <= 0 or args.poll_period <= 0:
        parser.error("--start-delay must be >= 0, --timeout and --poll-period > 0")
    return args


def project_pin(name: str, requirements: Path = ROOT / "requirements.txt") -> str:
    """The project's own pin of ``name`` (``name[extras]==version``), so the Hub's virtualenv gets the same."""
    for line in requirements.read_text().splitlines():
        requirement = line.split("#")[0].strip()
        if re.fullmatch(rf"{re.escape(name)}(\[[\w,]+\])?==[\w.]+", requirement):
            return requirement
    raise RuntimeError(f"{requirements} pins no {name}")


def install(*, kubespawner: bool = False) -> tuple[Path, Path]:
    """JupyterHub's virtualenv (KubeSpawner too, if asked) and configurable-http-proxy's command, installed once.

    The virtualenv also gets the PostgreSQL driver the project pins (psycopg, for the Hub's
    ``postgresql+psycopg://`` database URL)."""
    venv = CACHE / f"jupyterhub-{JUPYTERHUB_VERSION}"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    if not (venv / ".installed").exists():
        print(f"installing jupyterhub=={JUPYTERHUB_VERSION} into {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([*pip, f"jupyterhub=={JUPYTERHUB_VERSION}"], check=True)
        (venv / ".installed").touch()
    psycopg = project_pin("psycopg")
    marker = venv / f".installed-{psycopg.replace('[', '-').replace(']', '')}"
    if not marker.exists():
        print(f"installing {psycopg} into {venv} ...", flush=True)
        subprocess.run([*pip, f"jupyterhub=={JUPYTERHUB_VERSION}", psycopg], check=True)
        marker.touch()
    marker = venv / f".installed-kubespawner-{KUBESPAWNER_VERSION}-{KUBERNETES_ASYNCIO_VERSION}"
    if kubespawner and not marker.exists():
        print(f"installing jupyterhub-kubespawner=={KUBESPAWNER_VERSION} into {venv} ...", flush=True)
        # JupyterHub named again so that pip keeps it at its pin.
        subprocess.run(
            [*pip, f"jupyterhub=={JUPYTERHUB_VERSION}", f"jupyterhub-kubespawner=={KUBESPAWNER_VERSION}",
             f"kubernetes_asyncio=={KUBERNETES_ASYNCIO_VERSION}"],
            check=True,
        )  # fmt: skip
        marker.touch()
    prefix = CACHE / f"configurable-http-proxy-{CHP_VERSION}"
    chp = prefix / "node_modules" / ".bin" / "configurable-http-proxy"
    if not (prefix / ".installed").exists():
        print(f"installing configurable-http-proxy@{CHP_VERSION} into {prefix} ...", flush=True)
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
             f"configurable-http-proxy@{CHP_VERSION}"],
            check=True,
        )  # fmt: skip
        (prefix / ".installed").touch()
    return venv, chp


def run(args: argparse.Namespace) -> dict:
    kubernetes = args.driver == "kubernetes"
    venv, chp = install(kubespawner=kubernetes)
    rid = run_id()
    res = Resources(keep_temp=args.keep_logs)
    figures: dict = {
        "bench": "jupyterhub",
        "driver": args.driver,
        "launches": args.launches,
        "jupyterhub": JUPYTERHUB_VERSION,
        "chp": CHP_VERSION,
        "hub_db": args.hub_db,
        "poll_period": args.poll_period,
    }
    try:
        temp = res.make_temp_dir(f"npu-lab-bench-jupyterhub-{rid}-")
        figures["machine_before"] = machine_state(temp)
        ports = {"proxy_port": free_port(), "hub_port": free_port(), "proxy_api_port": free_port(), "stub_port": free_port()}
        setup_started = time.monotonic()
        if args.hub_db == "postgresql":
            db_name = f"bench_jupyterhub_{rid}"
            db_url = postgres_create_database(POSTGRES_SERVER_URL, db_name, connection_limit=HUB_DB_CONNECTIONS)
            res.on_close(f"drop database {db_name}", lambda: postgres_drop_database(POSTGRES_SERVER_URL, db_name))
            db_url = db_url.replace("postgres://", "postgresql+psycopg://", 1)  # SQLAlchemy's name for psycopg 3
        else:
            db_url = f"sqlite:///{temp / 'jupyterhub.sqlite'}"
        admin_password = new_token()
        config = hub_config(
            ports, chp=chp, temp=temp, db_url=db_url, spawn_limit=100 if args.default_spawn_limit else 0,
            admin_password=admin_password,
        )  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "CONFIGPROXY_", "PYTHON", "KUBE"))}
        cluster = None
        if kubernetes:
            from bench.jupyterhub_kubernetes import HubCluster

            cluster = HubCluster.start(res, temp, launches=args.launches, start_delay=args.start_delay)
            figures.update(kubespawner=KUBESPAWNER_VERSION, nodes=len(cluster.devcluster.nodes), namespace=cluster.namespace)
            env["KUBECONFIG"] = str(cluster.hub_kubeconfig)
            config += KUBESPAWNER.format(
                namespace=cluster.namespace,
                image=cluster.image,
                node_selector=cluster.node_selector,
                stub_port=ports["stub_port"],
                timeout=args.timeout,
                profile_list=cluster.profile_list(),
            )
        else:
            config += SIMULATOR_SPAWNER.format(start_delay=args.start_delay, stub_port=ports["stub_port"])
        (temp / "stub_server.py").write_text(STUB_SERVER)
        (temp / "jupyterhub_config.py").write_text(config)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        python = str(venv / "bin" / "python")
        stub = res.start(
            "stub", [python, str(temp / "stub_server.py"), str(ports["stub_port"]), JUPYTERHUB_VERSION], env=env, cwd=temp
        )
        hub = res.start(
            "jupyterhub", [str(venv / "bin" / "jupyterhub"), "-f", str(temp / "jupyterhub_config.py")], env=env, cwd=temp
        )
        base = f"http://127.0.0.1:{ports['proxy_port']}/hub/api"
        wait_until(
            lambda: http_request("GET", f"{base}/", timeout=5).status == 200,
            timeout=90,
            what="JupyterHub's API through the proxy",
            services=[hub, stub],
        )
        token = issue_token(base, ADMIN, admin_password)
        auth = {"Authorization": f"token {token}"}
        names = [f"student{i + 1:04d}" for i in range(args.launches)]
        created = http_request(
            "POST", f"{base}/users", headers={**auth, "Content-Type": "application/json"}, body=json.dumps({"usernames": names})
        )
        if created.status != 201:
            raise RuntimeError(f"creating {len(names)} users answered HTTP {created.status}: {created.body[:300]!r}")
        what = "dev cluster, hub and proxy start" if kubernetes else "hub and proxy start"
        print(f"set-up ({what}, {len(names)} users created): {time.monotonic() - setup_started:.1f} s", flush=True)

        def spawn(name: str):
            return lambda: http_request("POST", f"{base}/users/{name}/server", headers=auth, body=b"")

        fired = fire_at_once([(name, spawn(name)) for name in names], threads=args.threads)
        started = min(f.sent_at for f in fired)
        submitted = max(f.done_at for f in fired) - started
        first_429 = sum(1 for f in fired if f.status == 429)
        retried: list[Fired] = []
        retrier = None
        if first_429 and not args.no_retry:
            retrier = threading.Thread(
                target=retry_until_accepted,
                args=(fired, spawn),
                kwargs={
                    "should_retry": lambda f: f.status == 429,
                    "delay": lambda f: f.retry_after or 1.0,
                    "deadline": started + args.timeout,
                    "retried": retried,
                },
                daemon=True,
            )
            retrier.start()
        polled = poll_until_running(hub_fetch(base, token), set(names), deadline=started + args.timeout, period=args.poll_period)
        ready_at = polled.running_at
        if retrier is not None:
            retrier.join(timeout=1)
        sent = {f.key: f.sent_at for f in fired}
        launch_to_ready = [ready_at[name] - sent[name] for name in ready_at]
        all_ready = len(ready_at) == len(names)
        figures.update(
            {
                "threads": args.threads,
                "spawn_limit": 100 if args.default_spawn_limit else 0,
                "accepted": sum(1 for f in fired if f.status in (201, 202)),
                "running": len(ready_at),
                "http_statuses": status_counts(fired),
                "retry_statuses": status_counts(retried) if retried else "",
                "first_round_429": first_429,
                "total_429": first_429 + sum(1 for f in retried if f.status == 429),
                "submit_seconds": submitted,
                "time_to_all_running": (max(ready_at.values()) - started) if all_ready else None,
                "time_to_last_running": (max(ready_at.values()) - started) if ready_at else None,
                "launch_to_running_p50": percentile(launch_to_ready, 50),
                "launch_to_running_p99": percentile(launch_to_ready, 99),
                "polls": polled.polls,
                "failed_polls": polled.failed_polls,
                "poll_failure": polled.last_failure,
                "poll_p50": polled.poll_p50,
            }
        )
        if cluster is not None:
            figures["pod_resources_as_portal"] = cluster.pod_resources_as_portal()
            figures.update(stop_all(base, token, names, cluster, args))
        figures["machine_after"] = machine_state(temp)
        report(figures, args)
        return figures
    finally:
        res.close()


def hub_config(ports: dict[str, int], *, chp: Path, temp: Path, db_url: str, spawn_limit: int, admin_password: str) -> str:
    """The Hub's jupyterhub_config.py (without the spawner's part): its database, its admin, no token of the config's."""
    return CONFIG.format(
        **ports,
        chp=str(chp),
        proxy_token=new_token(),
        proxy_pid=str(temp / "proxy.pid"),
        db_url=db_url,
        cookie_secret=str(temp / "cookie_secret"),
        spawn_limit=spawn_limit,
        admin=ADMIN,
        admin_password=admin_password,
        page_size=PAGE_SIZE,
    )


def issue_token(api_url: str, user: str, password: str) -> str:
    """A token the Hub issues to ``user`` (POST /users/{user}/tokens, logged in by the body's ``auth``).

    A token the Hub made is stored with one SHA-512 round; a token written in the config file is
    the user's own secret, stored with 16,384 rounds that the Hub pays on every request."""
    body = {"auth": {"username": user, "password": password}, "note": "bench", "expires_in": 24 * 3600}
    response = http_request(
        "POST", f"{api_url}/users/{user}/tokens", headers={"Content-Type": "application/json"}, body=json.dumps(body)
    )
    if response.status not in (200, 201):
        raise RuntimeError(f"JupyterHub answered HTTP {response.status} when asked for a token: {response.body[:300]!r}")
    return response.json()["token"]


def stop_all(base: str, token: str, names: list[str], cluster, args: argparse.Namespace) -> dict:
    """Stop every server through the Hub's API; wait until no user has a server and no pod is left; count what is left."""
    auth = {"Authorization": f"token {token}"}
    fetch = hub_fetch(base, token)

    def stop(name: str):
        return lambda: http_request("DELETE", f"{base}/users/{name}/server", headers=auth)

    fired = fire_at_once([(name, stop(name)) for name in names], threads=args.threads)
    started = min(f.sent_at for f in fired)
    deadline = started + args.timeout
    wanted = set(names)
    stopped_at = None
    while time.time() < deadline:
        try:
            seen = fetch()
        except PollFailed:
            seen = None
        if seen is not None:
            serving = [name for name, state in seen.items() if name in wanted and state != "none"]
            if not serving and not cluster.pods():
                stopped_at = time.time()
                break
        time.sleep(0.2)
    return {
        "stop_http_statuses": status_counts(fired),
        "time_to_all_stopped": (stopped_at - started) if stopped_at else None,
        "left_in_api_server": cluster.left_over(),
    }


def report(f: dict, args: argparse.Namespace) -> None:
    limit = "default 100" if args.default_spawn_limit else "0 (no limit)"
    if f["driver"] == "kubernetes":
        spawner = (
            f"KubeSpawner {f['kubespawner']} on labs.devcluster ({f['nodes']} FlexNPU node(s)), "
            f"pods start {args.start_delay:g} s after binding"
        )
    else:
        spawner = f"spawner start {args.start_delay:g} s"
    print(
        f"JupyterHub {f['jupyterhub']} class start: {f['launches']} launches, configurable-http-proxy {f['chp']}, "
        f"concurrent_spawn_limit {limit}, {spawner}"
    )
    database = "PostgreSQL (a database of its own on 127.0.0.1:5432)"
    if f["hub_db"] == "sqlite":
        database = "SQLite (a file in the run's temp dir)"
    print(f"  the Hub's database: {database}; API token: issued by the Hub (POST /hub/api/users/{ADMIN}/tokens)")
    print(f"  running: {fmt_polling(f)}")
    print(f"  submitting: {f['launches']} POSTs from {args.threads} threads took {f['submit_seconds']:.2f} s")
    print(f"  HTTP statuses: {f['http_statuses']} (429s: {f['first_round_429']})")
    if f["retry_statuses"]:
        print(f"  retries after Retry-After: {f['retry_statuses']} (429s in all: {f['total_429']})")
    if f["time_to_all_running"] is not None:
        print(f"  time to all running: {f['time_to_all_running']:.2f} s ({f['running']} of {f['launches']} ready)")
    else:
        print(f"  NOT all running after {args.timeout:g} s: {f['running']} of {f['launches']} ready")
    print(
        f"  launch -> running per user: p50 {fmt_seconds(f['launch_to_running_p50'])}, "
        f"p99 {fmt_seconds(f['launch_to_running_p99'])}"
    )
    if f["driver"] == "kubernetes":
        same = f["pod_resources_as_portal"]
        print(f"  a pod's requests and limits are the portal's small FlexNPU lab's: {'yes' if same is True else same}")
        stopped = f["time_to_all_stopped"]
        when = f"{stopped:.2f} s" if stopped is not None else f"NOT within {args.timeout:g} s"
        print(f"  stop all: HTTP statuses {f['stop_http_statuses']}; every server and pod gone: {when}")
        left = f["left_in_api_server"]
        print(f"  left in the API server (namespace {f['namespace']}): " + ", ".join(f"{n} {kind}" for kind, n in left.items()))
    print(f"  machine: {fmt_machine(f.get('machine_before'), f.get('machine_after'))}")


def succeeded(figures: dict) -> bool:
    """Every server ran; on Kubernetes also every one stopped, nothing left, and the pods asked for the portal's resources."""
    if figures["time_to_all_running"] is None:
        return False
    if figures["driver"] != "kubernetes":
        return True
    return (
        figures["time_to_all_stopped"] is not None
        and not any(figures["left_in_api_server"].values())
        and figures["pod_resources_as_portal"] is True
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_keyboard_interrupt_on_sigterm()
    try:
        if args.install_only:
            venv, chp = install(kubespawner=args.driver == "kubernetes")
            print(f"installed: {venv}, {chp}")
            return 0
        figures = run(args)
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped and removed", file=sys.stderr)
        return 130
    write_json(args.json, figures)
    return 0 if succeeded(figures) else 1


if __name__ == "__main__":
    sys.exit(main())
