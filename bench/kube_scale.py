"""The Kubernetes driver at scale: 1,000 fake nodes x 8 cards, classes of 128, 512 and 1,024
started and stopped with the real API server in the loop, and the portal's requests counted.

    .venv/bin/python -m bench.kube_scale [--nodes 1000] [--classes 128,512,1024] [--start-delay 1]

What runs, all on this machine and given back at the end (also on Ctrl-C and SIGTERM):
  - a DevCluster (labs.devcluster: etcd, kube-apiserver, kube-scheduler and kube-controller-manager
    from `make controlplane`) in a temporary folder, with --nodes fake FlexNPU nodes of 8 cards
    (node names npu-node-1...) registered by the node simulator, which renews their leases every
    --node-grace / 4 seconds and starts a bound pod --start-delay seconds after it is bound;
  - deploy/base applied with `kubectl apply --server-side` (its node-agent DaemonSet puts a pod on
    every node, as on a real cluster), and the portal's Kubernetes driver with a token of the
    npu-lab-portal ServiceAccount deploy/base makes, so the shipped RBAC is what the portal has;
    the course's namespace from `manage.py course_manifests`, as deploy/README.md says;
  - the portal in this process (Django, portal.settings) on a new PostgreSQL database
    (bench_kubescale_<run>, dropped at the end) and a Redis database number of its own (claimed,
    emptied and released): --nodes Nodes x 8 Ascend 910B cards of 64 GiB with the fake nodes'
    names, one course whose quota fits the largest class, its students, the small template
    (5 % AI Core, 4 GiB). Lab objects get an Ingress (host labs.example.edu).
  - no Celery worker: the lifecycle controller runs here, in-process, as the Celery task runs it
    (labs.services.controller.controller_run: rounds of allocation pass, one observe() listing
    every lab pod, decide, creates and deletes on the controller's thread pool), again after
    LAB_CONTROLLER_FOLLOW_UP_SECONDS each time it ends, as its follow-up task would.

First printed: how long the nodes took to register and to be Ready, then the CPU the idle
cluster uses over --idle seconds (the node simulator is this process; the others by pid).

Then, for each K of --classes, with the cluster empty of labs: K sessions of the course queued
(written straight to the database, as bench.pass_scale does), and timed:
  - one allocation pass (labs.services.allocation.allocation_pass, alone) admitting and placing K
    (at most LAB_ALLOCATION_BATCH, 512: the controller's next pass admits the rest);
  - the controller's first run after it (its first round observes the cluster and sends the K
    creates: pod, secret, service and ingress each; it waits for answers at most
    LAB_CONTROLLER_WAIT_SECONDS, with the controller's lock let go);
  - time to all running: from the pass's start to the last session's running_at (a session that
    fails is counted and its reason printed);
  - every session stopped (session_stop, as the Stop button; these calls are timed apart), then
    controller runs until every session is stopped and the API server holds none of the course's
    lab pods, secrets, services or ingresses: time to all stopped, and to all gone, from the stops;
  - the requests the portal's ServiceAccount made to the API server over the class's start and
    stop (the API server's audit log: DevCluster.request_counts), per session by verb and
    resource; and the requests of every client (apiserver_request_total) on the lab objects
    (pods and their status and binding, secrets, services, ingresses, endpoints, events), per
    session; the CPU seconds of each component and of this process (the portal and the node
    simulator) during the start and during the stop.

Flat: every verb and resource the portal asks for costs, per session, at most what it cost in the
smallest class (10 % and 0.05 requests of slack: timing moves the number of controller rounds): a
list per session per round, say, would grow with the class and fail the run (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import (
    Resources,
    bench_main,
    new_token,
    portal_in_process,
    reference_loop_ms,
    run_id,
)
from labs.devcluster.portal import PORTAL_NAMESPACE, PORTAL_SERVICE_ACCOUNT

PORTAL_USER = f"system:serviceaccount:{PORTAL_NAMESPACE}:{PORTAL_SERVICE_ACCOUNT}"
COURSE_CODE = "SCALE101"
INGRESS_HOST = "labs.example.edu"
PROFILE = "flexnpu"
# What every client does for a lab, in apiserver_request_total (not leases or nodes: those the
# node simulator renews by the clock, not by the class).
LAB_RESOURCES = frozenset(
    {"pods", "pods/status", "pods/binding", "secrets", "services", "ingresses", "endpoints", "endpointslices", "events"}
)
SLACK_RATIO = 1.10
SLACK_REQUESTS = 0.05


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.kube_scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000, help="fake FlexNPU nodes of 8 cards, default 1000")
    parser.add_argument(
        "--classes", default="128,512,1024", help="class sizes K, comma-separated, run in order, default 128,512,1024"
    )
    parser.add_argument("--start-delay", type=float, default=1.0, help="seconds from a pod's binding to Running, default 1")
    parser.add_argument(
        "--node-grace",
        type=int,
        default=120,
        help="the controller-manager's node monitor grace period in seconds, default 120: each node's lease is renewed "
        "every quarter of it (1,000 nodes: 33 renewals a second; 40, a kubelet's pace, makes it 100)",
    )
    parser.add_argument("--idle", type=float, default=20.0, help="seconds the idle cluster's CPU is measured over, default 20")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds each phase of a class may take, default 600")
    parser.add_argument("--keep-logs", action="store_true", help="keep the cluster's folder (logs, audit log)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    try:
        args.classes = [int(k) for k in args.classes.split(",") if k.strip()]
    except ValueError:
        parser.error(f"--classes must be whole numbers separated by commas, got {args.classes!r}")
    if not args.classes or min(args.classes) < 1:
        parser.error("--classes needs at least one class size, each >= 1")
    if args.nodes < 1 or args.start_delay < 0 or args.node_grace < 4 or args.idle < 0 or args.timeout <= 0:
        parser.error("--nodes must be >= 1, --start-delay and --idle >= 0, --node-grace >= 4, --timeout > 0")
    if max(args.classes) > args.nodes * 128:
        parser.error("a class larger than the nodes hold (128 small labs a node)")
    return args


# --- the cluster, deploy/ and the course namespace (labs.devcluster.portal) ------------------------


def raw_json(response: Any) -> Any:
    """A raw answer (``_preload_content=False``: no model classes, a thousand nodes over), its connection given back."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def start_cluster(res: Resources, args: argparse.Namespace):
    from labs.devcluster.cluster import DevCluster
    from labs.devcluster.nodes import fake_nodes

    directory = Path(tempfile.mkdtemp(prefix="npu-lab-bench-kubescale-cluster-"))
    cluster = DevCluster(
        directory,
        nodes=fake_nodes(args.nodes, profiles=(PROFILE,)),
        start_delay_seconds=args.start_delay,
        node_monitor_grace_seconds=args.node_grace,
        keep_directory=args.keep_logs,
    )
    # Registered first, so an interrupted start is stopped too (stop copes with a partial one).
    res.on_close("stop the control plane", cluster.stop)
    if args.keep_logs:
        res.on_close("say where the cluster's logs are", lambda: print(f"cluster logs kept in {directory}", file=sys.stderr))
    cluster.start()
    return cluster


def course_namespace(cluster, code: str) -> str:
    """The course's namespace from ``manage.py course_manifests``, once its ServiceAccount exists."""
    from django.conf import settings

    from labs.devcluster.portal import apply_course_manifests
    from labs.drivers.kubernetes.builders import namespace_name

    apply_course_manifests(cluster, code, profile=PROFILE)
    namespace = namespace_name(code, namespace_prefix=settings.LAB_DRIVER["OPTIONS"].get("namespace_prefix", "lab-"))
    cluster.wait_for_service_account(namespace)
    return namespace


def wait_for_node_agents(cluster, timeout: float) -> float:
    """Until deploy/base's node-agent DaemonSet has a Ready pod on every node; the seconds it took."""
    from kubernetes import client

    apps = client.AppsV1Api(cluster.api)
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        status = raw_json(apps.read_namespaced_daemon_set_status("node-agent", "npu-lab-agent", _preload_content=False))
        ready = (status.get("status") or {}).get("numberReady", 0)
        if ready == len(cluster.nodes):
            return time.monotonic() - began
        time.sleep(1.0)
    raise RuntimeError(f"the node agents were not Ready on every node after {timeout:.0f} s ({ready} of {len(cluster.nodes)})")


# --- CPU --------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_now(cluster) -> dict[str, float]:
    """CPU seconds so far of each component, and of this process (the portal and the node simulator)."""
    cpu = {name: cpu_seconds(pid) for name, pid in cluster.pids().items()}
    cpu["this process"] = time.process_time()
    return cpu


def cpu_since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


def idle_cpu(cluster, seconds: float) -> dict[str, float]:
    """Each component's share of one core (percent) over ``seconds`` of the idle cluster; the node
    simulator is this process (nothing else runs in it meanwhile)."""
    pids = cluster.pids()
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    own = time.process_time()
    began = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - began
    shares = {name: 100 * (cpu_seconds(pid) - before[name]) / elapsed for name, pid in pids.items()}
    shares["node simulator"] = 100 * (time.process_time() - own) / elapsed
    return shares


# --- the portal's data --------------------------------------------------------------------------


def build(nodes: list[str], students: int):
    """The fake nodes as the portal's Nodes with 8 cards each, one course with a quota for ``students``, its students."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    from labs.models import Card, Course, CourseQuota, Enrollment, Institution, LabTemplate, Node

    institution = Institution.objects.create(name="Bench University", slug="bench")
    template = LabTemplate.objects.create(
        institution=institution,
        name="small",
        slug="small",
        image="registry.example.edu/jupyterlab:4",
        core_percent=5,
        memory_mib=4096,
    )
    node_rows = Node.objects.bulk_create((Node(name=name) for name in nodes), batch_size=5000)
    Card.objects.bulk_create(
        (
            Card(node=node, index=i, die_id=f"{node.name}-die-{i}", chip_type="Ascend910B", memory_mib=64 * 1024)
            for node in node_rows
            for i in range(8)
        ),
        batch_size=5000,
    )
    course = Course.objects.create(institution=institution, code=COURSE_CODE, title="Kubernetes at scale", term="bench")
    CourseQuota.objects.create(
        course=course, core_percent=5 * students, memory_mib=4096 * students, instance_count=students, sessions_per_student=1
    )
    course.templates.add(template)
    password = make_password("bench-password-not-secret")
    User = get_user_model()
    users = User.objects.bulk_create(User(username=f"scale{i:05d}", password=password) for i in range(students))
    Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u in users)
    return course, template, users


def queue_class(course, template, students) -> list:
    """The class's sessions, queued; their ids."""
    from django.utils import timezone

    from labs.models import LabSession

    now = timezone.now()
    sessions = LabSession.objects.bulk_create(
        LabSession(
            student=u,
            course=course,
            template=template,
            state="queued",
            queue_at=now,
            secret=new_token(),
            reason_code="session.queued",
        )
        for u in students
    )
    return [s.pk for s in sessions]


# --- one class ----------------------------------------------------------------------------------


def controller_runs_until(session_ids: list, states: set[str], *, timeout: float, what: str) -> int:
    """``controller_run()`` (the Celery task's body) again and again, a follow-up's pause apart,
    until every session is in one of ``states``; the number of rounds it went."""
    from django.conf import settings

    from labs.services.controller import controller_run

    rounds = 0
    deadline = time.monotonic() + timeout
    while True:
        rounds += controller_run().rounds
        counts = by_state(session_ids)
        if set(counts) <= states:
            return rounds
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}: {counts}; {reasons(session_ids)}")
        time.sleep(settings.LAB_CONTROLLER_FOLLOW_UP_SECONDS)


def by_state(session_ids: list) -> dict[str, int]:
    from django.db.models import Count

    from labs.models import LabSession

    rows = LabSession.objects.filter(pk__in=session_ids).values_list("state").annotate(n=Count("id"))
    return dict(rows.order_by())


def reasons(session_ids: list, *, states: tuple[str, ...] = ("queued", "admitted", "starting", "failed")) -> str:
    """The commonest reasons of the sessions in ``states``, in English."""
    from labs.models import LabSession

    said: Counter[str] = Counter()
    for session in LabSession.objects.filter(pk__in=session_ids, state__in=states).only("state", "reason_code", "reason_params"):
        said[f"{session.state}: {session.reason}"[:200]] += 1
    return "; ".join(f"{n} x {reason}" for reason, n in said.most_common(5)) or "no reasons"


def run_class(cluster, namespace: str, course, template, students, k: int, timeout: float) -> dict[str, Any]:
    from django.conf import settings
    from django.db.models import Max

    from labs.devcluster.portal import lab_objects_left
    from labs.domain.reasons import Reason
    from labs.models import LabSession
    from labs.services.allocation import allocation_pass
    from labs.services.controller import controller_run
    from labs.services.sessions import session_stop

    portal_before = cluster.request_counts(PORTAL_USER)
    every_before = cluster.metric_request_counts()
    session_ids = queue_class(course, template, students[:k])
    cpu_start = cpu_now(cluster)
    started_wall = time.time()
    began = time.perf_counter()
    admitted = len(allocation_pass().admitted)
    pass_seconds = time.perf_counter() - began
    if admitted != min(k, settings.LAB_ALLOCATION_BATCH):
        batch = settings.LAB_ALLOCATION_BATCH
        raise RuntimeError(f"the allocation pass admitted {admitted} of {k} (a pass admits {batch} at most)")
    first = time.perf_counter()
    first_rounds = controller_run().rounds
    first_run_seconds = time.perf_counter() - first
    rounds = first_rounds + controller_runs_until(
        session_ids, {"running", "failed"}, timeout=timeout, what=f"all {k} labs running"
    )
    failed = by_state(session_ids).get("failed", 0)
    if failed:
        print(f"  {failed} of {k} sessions failed: {reasons(session_ids, states=('failed',))}", flush=True)
    last_running = LabSession.objects.filter(pk__in=session_ids, state="running").aggregate(Max("running_at"))
    to_running = last_running["running_at__max"].timestamp() - started_wall
    cpu_running = cpu_now(cluster)

    stop_calls = time.perf_counter()
    running = LabSession.objects.filter(pk__in=session_ids, state="running").values_list("pk", "student__username")
    for session_id, username in running:
        session_stop(session_id=session_id, reason=Reason.of("session.stopped_by", who=username))
    stopping = time.perf_counter()
    stop_calls_seconds = stopping - stop_calls
    rounds += controller_runs_until(session_ids, {"stopped", "failed"}, timeout=timeout, what=f"all {k} labs stopped")
    to_stopped = time.perf_counter() - stopping
    deadline = time.monotonic() + timeout
    while left := lab_objects_left(cluster.api, namespace):
        if time.monotonic() > deadline:
            counts = ", ".join(f"{len(names)} {kind}" for kind, names in left.items())
            raise RuntimeError(f"left in {namespace} after {timeout:.0f} s: {counts}")
        time.sleep(0.2)
    to_gone = time.perf_counter() - stopping
    cpu_gone = cpu_now(cluster)
    portal = cluster.request_counts(PORTAL_USER) - portal_before
    every = cluster.metric_request_counts() - every_before
    return {
        "k": k,
        "allocation_pass_seconds": pass_seconds,
        "allocation_pass_admitted": admitted,
        "first_controller_run_seconds": first_run_seconds,
        "first_controller_run_rounds": first_rounds,
        "to_all_running_seconds": to_running,
        "stop_calls_seconds": stop_calls_seconds,
        "to_all_stopped_seconds": to_stopped,
        "to_all_gone_seconds": to_gone,
        "controller_rounds": rounds,
        "cpu_seconds_to_all_running": cpu_since(cpu_start, cpu_running),
        "cpu_seconds_stopping": cpu_since(cpu_running, cpu_gone),
        "failed": failed,
        "portal_requests": {f"{verb} {resource}": n for (verb, resource), n in sorted(portal.items())},
        "lab_requests_every_client": {
            f"{verb} {resource}": n for (verb, resource), n in sorted(every.items()) if resource in LAB_RESOURCES
        },
    }


def not_flat(results: list[dict[str, Any]]) -> list[str]:
    """The portal's verb/resource pairs whose count per session grew past the smallest class's (with slack)."""
    smallest = min(results, key=lambda r: r["k"])
    base = {key: n / smallest["k"] for key, n in smallest["portal_requests"].items()}
    problems = []
    for result in results:
        for key, n in result["portal_requests"].items():
            per_session = n / result["k"]
            allowed = base.get(key, 0.0) * SLACK_RATIO + SLACK_REQUESTS
            if per_session > allowed:
                problems.append(
                    f"{key}: {per_session:.2f} a session at K={result['k']}, {base.get(key, 0.0):.2f} at K={smallest['k']}"
                )
    return problems


def print_class(result: dict[str, Any]) -> None:
    k = result["k"]
    print(f"K = {k}:")
    admitted = result["allocation_pass_admitted"]
    rest = " (a pass admits at most LAB_ALLOCATION_BATCH; the controller's next admits the rest)" if admitted < k else ""
    print(f"  one allocation pass admitting and placing {admitted} of {k}: {result['allocation_pass_seconds']:.3f} s{rest}")
    print(
        f"  the controller's first run after it ({result['first_controller_run_rounds']} round(s): observe, "
        f"{k} creates sent): {result['first_controller_run_seconds']:.2f} s"
    )
    if result["failed"]:
        print(
            f"  time to the last of {k - result['failed']} running, {result['failed']} failed (from the pass): "
            f"{result['to_all_running_seconds']:.2f} s"
        )
    else:
        print(f"  time to all running (from the pass): {result['to_all_running_seconds']:.2f} s")
    print(
        f"  time to all stopped (from the {k} stops recorded, which took {result['stop_calls_seconds']:.2f} s): "
        f"{result['to_all_stopped_seconds']:.2f} s; all gone from the API server: {result['to_all_gone_seconds']:.2f} s"
    )
    print(f"  controller rounds: {result['controller_rounds']}; sessions failed: {result['failed']}")
    for phase, key in (("start", "cpu_seconds_to_all_running"), ("stop (with the stop calls)", "cpu_seconds_stopping")):
        print(f"  CPU seconds of the {phase}: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in result[key].items()))
    verbs: Counter[str] = Counter()
    for key, n in result["portal_requests"].items():
        verbs[key.split(" ", 1)[0]] += n
    summary = ", ".join(f"{verb} {verbs.get(verb, 0) / k:.2f}" for verb in ("create", "get", "list", "watch", "delete"))
    others = sorted(set(verbs) - {"create", "get", "list", "watch", "delete"})
    summary += "".join(f", {verb} {verbs[verb] / k:.2f}" for verb in others)
    print(f"  the portal's API requests per session: {summary}")
    print("    " + ", ".join(f"{key} {n / k:.2f}" for key, n in result["portal_requests"].items()))
    every = result["lab_requests_every_client"]
    print(f"  every client's requests on lab objects per session: {sum(every.values()) / k:.2f}")
    print("    " + ", ".join(f"{key} {n / k:.2f}" for key, n in every.items()))


def run(args: argparse.Namespace) -> dict:
    from kubernetes import client

    from labs.devcluster.portal import deploy_portal, portal_driver_options, portal_token

    rid = run_id()
    res = Resources()
    try:
        print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        print(f"reference loop: {reference_loop_ms():.0f} ms (how fast this machine runs Python now)", flush=True)
        began = time.monotonic()
        cluster = start_cluster(res, args)
        starting = {name: round(seconds, 1) for name, seconds in cluster.start_seconds.items()}
        print(
            f"control plane with {args.nodes:,} fake nodes up in {time.monotonic() - began:.1f} s: "
            f"control plane {starting['control plane']} s, the nodes registered (Node, status, Lease each) "
            f"in {starting['nodes registered']} s, all Ready and untainted {starting['nodes ready']} s after the first",
            flush=True,
        )
        deploy_portal(cluster)
        token = portal_token(client.CoreV1Api(cluster.api), seconds=6 * 3600)
        agents_seconds = wait_for_node_agents(cluster, timeout=args.timeout)
        print(f"deploy/base applied; its node agent Ready on all {args.nodes:,} nodes after {agents_seconds:.1f} s", flush=True)
        portal_in_process(
            res,
            "kubescale",
            rid,
            connection_limit=20,
            LAB_DRIVER="labs.drivers.kubernetes.KubernetesDriver",
            LAB_DRIVER_OPTIONS=json.dumps(
                portal_driver_options(cluster, token, profile=PROFILE, ingress_host=INGRESS_HOST, request_timeout_seconds=30)
            ),
        )
        from django.conf import settings

        course, template, students = build([node.name for node in cluster.nodes], max(args.classes))
        namespace = course_namespace(cluster, course.code)
        idle = {}
        if args.idle:
            time.sleep(min(5.0, args.idle))  # the node agents' last status updates
            idle = idle_cpu(cluster, args.idle)
            renewals = args.nodes / (max(4, args.node_grace) / 4)
            print(
                f"idle CPU over {args.idle:.0f} s ({renewals:.0f} lease renewals a second), % of one core: "
                + ", ".join(f"{name} {share:.1f}" for name, share in idle.items())
                + f"; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
                flush=True,
            )
        print(
            f"controller: {settings.LAB_CONTROLLER_THREADS} driver threads, waits {settings.LAB_CONTROLLER_WAIT_SECONDS:g} s "
            f"for answers, create lease {settings.LAB_CREATE_LEASE_SECONDS} s; start delay {args.start_delay:g} s",
            flush=True,
        )
        results = []
        for k in args.classes:
            result = run_class(cluster, namespace, course, template, students, k, args.timeout)
            print_class(result)
            print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
            results.append(result)
        problems = not_flat(results)
        if problems:
            print("the portal's requests per session are NOT flat as the class grows:")
            for problem in problems:
                print(f"  {problem}")
        else:
            print(f"the portal's requests per session are flat as the class grows (K = {', '.join(map(str, args.classes))})")
        errors = cluster.simulator.errors if cluster.simulator else []
        if errors:
            print(f"node simulator errors: {len(errors)}, the first: {errors[0]}")
        return {
            "bench": "kube_scale",
            "nodes": args.nodes,
            "node_grace_seconds": args.node_grace,
            "start_delay_seconds": args.start_delay,
            "start_seconds": cluster.start_seconds,
            "node_agents_ready_seconds": agents_seconds,
            "idle_cpu_percent": idle,
            "classes": results,
            "flat": not problems,
            "not_flat": problems,
            "simulator_errors": len(errors),
        }
    finally:
        res.close()


def main(argv: list[str] | None = None) -> int:
    """0 when the portal's requests per session are flat, 1 when not, 130 when interrupted."""
    return bench_main(
        run,
        parse_args(argv),
        passed=lambda figures: figures["flat"],
        interrupted="interrupted; the cluster, the database and the Redis number were given back",
    )


if __name__ == "__main__":
    sys.exit(main())
