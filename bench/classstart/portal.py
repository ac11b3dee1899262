"""What the class start runs on: the cluster, the class and its logins, the portal's processes."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

from bench.harness import ROOT, Resources, free_port, http_request, new_token, wait_until

INSTANCES_PER_SERVER = 128  # 8 cards x 16 small (5 %, 4 GiB) development instances
PASSWORD = "bench-password-not-secret"


def portal_env(
    *,
    database_url: str,
    redis_url: str,
    var_dir: Path,
    start_delay: float,
    channels_prefix: str,
    driver: dict[str, str] | None = None,
) -> dict[str, str]:
    """The portal's environment; ``driver``: the ``LAB_DRIVER*`` variables (default: the simulator, ``start_delay``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "LAB_", "CELERY_")) and k != "PORTAL_VAR_DIR"}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        SECRET_KEY=new_token(),
        DEBUG="0",
        PORTAL_VAR_DIR=str(var_dir),
        CHANNELS_PREFIX=channels_prefix,
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    env.update(
        driver or {"LAB_DRIVER": "labs.drivers.simulator.SimulatorDriver", "LAB_SIMULATOR_DELAY_SECONDS": str(start_delay)}
    )
    return env


def server_name(index: int) -> str:
    """The name of the bench's ``index``-th server (0-based): the portal's Node and, on Kubernetes, the node's."""
    return f"npu-{index + 1:03d}"


def start_cluster(res: Resources, temp: Path, args: argparse.Namespace) -> tuple[object, dict[str, str]]:
    """A local control plane with ``--servers`` fake FlexNPU nodes, deploy/ applied; it and the driver's variables.

    The driver authenticates with a token of the ServiceAccount deploy/ makes (the shipped RBAC),
    and gives each lab an Ingress, as a portal with LAB_K8S_INGRESS_HOST does.
    """
    from kubernetes import client

    from labs.devcluster.cluster import DevCluster
    from labs.devcluster.nodes import FakeNode
    from labs.devcluster.portal import deploy_portal, portal_driver_options, portal_token

    began = time.monotonic()
    nodes = [FakeNode(name=server_name(i), profile="flexnpu") for i in range(args.servers)]
    cluster = DevCluster(temp / "cluster", nodes=nodes, start_delay_seconds=args.start_delay)
    res.on_close("stop the control plane", cluster.stop)
    cluster.start()
    deploy_portal(cluster)
    options = portal_driver_options(
        cluster,
        portal_token(client.CoreV1Api(cluster.api), seconds=24 * 3600),
        namespace_prefix="lab-",
        profile="flexnpu",
        ingress_host="labs.bench.example",
    )
    print(f"control plane with {args.servers} fake node(s), deploy/ applied: {time.monotonic() - began:.1f} s", flush=True)
    driver = {"LAB_DRIVER": "labs.drivers.kubernetes.KubernetesDriver", "LAB_DRIVER_OPTIONS": json.dumps(options)}
    return cluster, driver


def build_class(launches: int, servers: int):
    """Nodes, one course with a quota for every launch, ``launches`` students, the small template."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    from labs.models import Card, Course, CourseQuota, Enrollment, Institution, LabTemplate, Node

    institution = Institution.objects.create(name="Bench University", slug="bench")
    for s in range(servers):
        node = Node.objects.create(name=server_name(s))
        Card.objects.bulk_create(
            Card(node=node, index=i, die_id=f"{node.name}-die-{i}", chip_type="Ascend910B", memory_mib=64 * 1024)
            for i in range(8)
        )
    course = Course.objects.create(institution=institution, code="BENCH101", title="Class start bench", term="bench")
    CourseQuota.objects.create(
        course=course,
        core_percent=5 * launches,
        memory_mib=4096 * launches,
        instance_count=launches,
        sessions_per_student=1,
        max_session_minutes=180,
    )
    template = LabTemplate.objects.create(
        institution=institution, name="small", slug="small", image="jupyter/base:latest", core_percent=5, memory_mib=4096
    )
    course.templates.add(template)
    password = make_password(PASSWORD)  # one hash shared by all: hashing K times would only cost set-up time
    User = get_user_model()
    students = User.objects.bulk_create(User(username=f"student{i + 1:04d}", password=password) for i in range(launches))
    Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u in students)
    return course, template, students


def login_cookies_direct(students) -> dict[int, tuple[str, str]]:
    """A Django session per student written straight to the database, as ``login()`` would; returns Cookie headers."""
    from datetime import timedelta

    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore
    from django.contrib.sessions.models import Session
    from django.utils import timezone
    from django.utils.crypto import get_random_string

    store = SessionStore()
    expire = timezone.now() + timedelta(days=1)
    rows, cookies = [], {}
    for user in students:
        key = get_random_string(32, "abcdefghijklmnopqrstuvwxyz0123456789")
        data = {
            SESSION_KEY: str(user.pk),
            BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
            HASH_SESSION_KEY: user.get_session_auth_hash(),
        }
        rows.append(Session(session_key=key, session_data=store.encode(data), expire_date=expire))
        csrf = get_random_string(32)  # an unmasked CSRF secret: valid as both the cookie and the header
        cookies[user.pk] = (f"sessionid={key}; csrftoken={csrf}", csrf)
    Session.objects.bulk_create(rows, batch_size=1000)
    return cookies


def login_cookies_http(base_url: str, students, threads: int) -> dict[int, tuple[str, str]]:
    """Log each student in through /accounts/login/ (GET for the CSRF cookie and token, then POST)."""
    import re

    from bench.harness import cookies_of

    def login(user) -> tuple[int, tuple[str, str]]:
        page = http_request("GET", f"{base_url}/accounts/login/")
        csrf_cookie = cookies_of(page)["csrftoken"]
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body).group(1).decode()
        body = urlencode({"username": user.username, "password": PASSWORD, "csrfmiddlewaretoken": token})
        done = http_request(
            "POST",
            f"{base_url}/accounts/login/",
            body=body,
            headers={"Cookie": f"csrftoken={csrf_cookie}", "Content-Type": "application/x-www-form-urlencoded"},
        )
        jar = cookies_of(done)
        if done.status != 302 or "sessionid" not in jar:
            raise RuntimeError(f"login of {user.username} failed with HTTP {done.status}")
        csrf = jar.get("csrftoken", csrf_cookie)
        return user.pk, (f"sessionid={jar['sessionid']}; csrftoken={csrf}", csrf)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return dict(pool.map(login, students))


def deploy_web_env() -> dict[str, str]:
    """The settings deploy/base/web.yaml gives the web container by value (not the shared config, the
    secrets' files or the host names it expands): the bench's web processes run as deploy/ runs them."""
    import yaml

    from portal.settings_table import SETTINGS

    with open(ROOT / "deploy" / "base" / "web.yaml") as handle:
        documents = [d for d in yaml.safe_load_all(handle) if d and d.get("kind") == "Deployment"]
    (web,) = [c for d in documents for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "web"]
    return {
        e["name"]: e["value"]
        for e in web.get("env", [])
        if e["name"] in SETTINGS and "value" in e and "$(" not in e["value"] and not e["name"].endswith("_FILE")
    }


def start_services(
    res: Resources, env: dict[str, str], args: argparse.Namespace, rid: str, *, web_processes: int = 1, own_ports: bool = False
) -> list[str]:
    """Daphne (``web_processes`` of them, with the settings deploy/ gives its web pods), the workers
    and beat; the URLs the portal answers on.

    ``own_ports``: each web process listens on a port of its own and the URLs are one per process,
    for the client to spread its requests over them as a Kubernetes Service spreads connections
    over the web pods (deploy/). Else they all accept on one listening socket bound here (as
    supervisor's ``fcgi-program`` runs them on a machine of their own, deploy/README.md) and
    there is one URL: the kernel hands each connection to whichever process accepts first.
    """
    python = sys.executable
    web_env = {**env, **deploy_web_env()}
    if args.web_conn_max_age is not None:
        web_env["DATABASE_URL"] = f"{env['DATABASE_URL']}?conn_max_age={args.web_conn_max_age}"
    if web_processes == 1 or own_ports:
        ports = [free_port() for _ in range(web_processes)]
        webs = [
            res.start(
                "daphne" if web_processes == 1 else f"daphne{i + 1}",
                [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
                env=web_env,
            )
            for i, port in enumerate(ports)
        ]
    else:
        # One socket, bound here and inherited: the kernel hands each connection to one of the processes.
        ports = [free_port()]
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", ports[0]))
        listener.listen(1024)
        res.on_close("close the web processes' listening socket", listener.close)
        fd = listener.fileno()
        webs = [
            res.start(f"daphne{i + 1}", [python, "-m", "daphne", "--fd", str(fd), "portal.asgi:application"], env=web_env,
                      pass_fds=(fd,))
            for i in range(web_processes)
        ]  # fmt: skip
    workers = [
        res.start(
            f"worker{i + 1}",
            [
                python, "-m", "celery", "-A", "portal", "worker",
                "--loglevel", "INFO", "--pool", "prefork", "--concurrency", str(args.concurrency),
                "--hostname", f"bench-{rid}-w{i + 1}@%h", "--without-gossip", "--without-mingle",
            ],
            env=env,
        )
        for i in range(args.workers)
    ]  # fmt: skip
    beat = res.start(
        "beat",
        [
            python, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO",
            "--schedule", str(res.temp_dir / "celerybeat-schedule"),
        ],
        env=env,
    )  # fmt: skip
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    everyone = [*webs, beat, *workers]
    for url in urls:
        wait_until(lambda u=url: http_request("GET", f"{u}/accounts/login/", timeout=5).status == 200,
                   timeout=60, what="Daphne to answer", services=everyone)  # fmt: skip
    for worker in workers:
        wait_until(lambda w=worker: " ready." in w.output(), timeout=60, what=f"{worker.name} to be ready", services=everyone)
    wait_until(lambda: "beat: Starting" in beat.output(), timeout=60, what="beat to start", services=everyone)
    return urls
