"""The portal's class start beside JupyterHub's, same K, repeated and alternated.

    .venv/bin/python -m bench.side_by_side --launches 128 --repeats 3
    .venv/bin/python -m bench.side_by_side --launches 128,512
    .venv/bin/python -m bench.side_by_side --launches 128 --driver kubernetes

For each K in --launches, runs ``python -m bench.classstart`` and ``python -m bench.jupyterhub``
(each a fresh process with fresh services, database and temp dir) --repeats times, alternating
which goes first, so a slow spell of this shared machine hits both. The portal gets
ceil(K / 128) servers so that every launch fits (one 8 x 910B server takes 128 small instances).
Both use the same client thread pool, start delay (1 s) and timeout, and see "running" the same
way: one poller reads the class through each side's own REST API every --poll-period s (0.1), with
a token that side issued (the portal: GET /api/v1/sessions/, a session's state; JupyterHub: GET
/hub/api/users, a server's ready; 500 a page on both; bench/poll.py). Both run on PostgreSQL, each
on a database of its own on 127.0.0.1:5432; --hub-db sqlite gives JupyterHub its default SQLite
file instead, to show what that costs it. Each run's own output is shown indented; then the
medians of both and the ratio "portal / JupyterHub time to all running" (above 1: the portal is
slower). A run that did not get every session running within the timeout counts as "not all
running" (an infinite time) in the median. Beside each run's time: the load average before and
after it and the median time of a small write + fsync in its temp dir just before its result, so
that a reader sees the machine's state (this machine is shared).

--driver kubernetes is passed on to both benches: each run then starts a fresh labs.devcluster
(the real API server, scheduler and controller-manager, ceil(K / 128) fake FlexNPU nodes, the same
start delay) and the portal's Kubernetes driver, or JupyterHub's KubeSpawner, makes a pod per
launch. --driver simulator (the default) is passed on to neither: both benches' own default.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import ROOT, raise_keyboard_interrupt_on_sigterm
from bench.jupyterhub import HUB_DATABASES
from bench.poll import METHOD, POLL_PERIOD, fmt_machine

INSTANCES_PER_SERVER = 128
# Issue 32's class start targets on the simulator (a 1 s start): the portal's time to all running.
TARGETS = {128: 1.6, 1024: 6.0, 2048: 12.0}
HUB_DATABASE_NAMES = {"postgresql": "PostgreSQL", "sqlite": "SQLite (its default: a file in the run's temp dir)"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.side_by_side", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", default="128", help="comma-separated K values, default 128 (e.g. 128,512)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each bench per K, default 3")
    parser.add_argument("--workers", type=int, default=2, help="portal: Celery worker processes, default 2")
    parser.add_argument("--concurrency", type=int, default=4, help="portal: prefork children per worker, default 4")
    parser.add_argument(
        "--driver",
        choices=("simulator", "kubernetes"),
        default="simulator",
        help="both: simulated labs (default), or pods on a fresh dev cluster (labs.devcluster) per run",
    )
    parser.add_argument("--start-delay", type=float, default=1.0, help="both: seconds a lab takes to start, default 1.0")
    parser.add_argument("--threads", type=int, default=32, help="both: client threads, default 32")
    parser.add_argument("--timeout", type=float, default=180.0, help="both: seconds to give up on a run, default 180")
    parser.add_argument(
        "--web-conn-max-age",
        type=int,
        metavar="SECONDS",
        help="portal: passed on to bench.classstart (default: the portal's own)",
    )
    parser.add_argument(
        "--hub-db",
        choices=HUB_DATABASES,
        default="postgresql",
        help="JupyterHub's database: postgresql (default, as its documentation recommends for production) or sqlite",
    )
    parser.add_argument(
        "--poll-period",
        type=float,
        default=POLL_PERIOD,
        help=f"both: seconds between polls, default {POLL_PERIOD:g}",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every run's figures and the medians to PATH")
    args = parser.parse_args(argv)
    try:
        args.launches = [int(k) for k in args.launches.split(",") if k.strip()]
    except ValueError:
        parser.error("--launches takes comma-separated integers, e.g. 128,512")
    if not args.launches or min(args.launches) < 1 or args.repeats < 1:
        parser.error("--launches values and --repeats must be >= 1")
    if args.poll_period <= 0:
        parser.error("--poll-period must be > 0")
    return args


def run_bench(module: str, options: list[str]) -> dict:
    """Run one bench in a child process, echo its output indented, and return its JSON figures."""
    with tempfile.NamedTemporaryFile(prefix="npu-lab-bench-", suffix=".json", delete=False) as handle:
        path = Path(handle.name)
    command = [sys.executable, "-m", module, *options, "--json", str(path)]
    print(f"  $ python -m {module} {' '.join(options)}", flush=True)
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in child.stdout:
            print(f"    {line.rstrip()}", flush=True)
        child.wait()
    except KeyboardInterrupt:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)  # the bench cleans up on SIGTERM as on Ctrl-C
            child.wait(timeout=120)
        raise
    try:
        figures = json.loads(path.read_text()) if path.stat().st_size else {}
    finally:
        path.unlink(missing_ok=True)
    if not figures:
        figures = {"error": f"{module} exited with code {child.returncode} and wrote no figures"}
        print(f"    ({figures['error']})", flush=True)
    return figures


def seconds(figures: dict, key: str) -> float:
    value = figures.get(key)
    return math.inf if value is None else float(value)


def fmt(value: float) -> str:
    return "not all running" if math.isinf(value) else f"{value:.2f} s"


def fmt_run(figures: dict) -> str:
    """'2.31 s; load average 1.20 0.90 0.80 -> ..., fsync 0.30 ms (...)': a run's time beside the machine's state."""
    machine = fmt_machine(figures.get("machine_before"), figures.get("machine_after"))
    return f"{fmt(seconds(figures, 'time_to_all_running'))}; {machine}"


def cpu_per_session(runs: list[dict]) -> dict[str, float]:
    """The median over ``runs`` of each part of the portal's CPU ms per session (``bench.classstart``'s
    ``cpu_ms_per_session``: Daphne, Celery, PostgreSQL, total); empty when no run measured it."""
    measured = [f["cpu_ms_per_session"] for f in runs if f.get("cpu_ms_per_session")]
    if not measured:
        return {}
    return {name: statistics.median(m.get(name, 0.0) for m in measured) for name in measured[0]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_keyboard_interrupt_on_sigterm()
    began = time.monotonic()
    common = ["--start-delay", str(args.start_delay), "--threads", str(args.threads), "--timeout", str(args.timeout)]
    common += ["--poll-period", str(args.poll_period)]
    if args.driver != "simulator":
        common += ["--driver", args.driver]
    results: dict[int, dict[str, list[dict]]] = {}
    try:
        for k in args.launches:
            servers = max(1, math.ceil(k / INSTANCES_PER_SERVER))
            portal = ["--launches", str(k), "--servers", str(servers), "--workers", str(args.workers)]
            portal += ["--concurrency", str(args.concurrency), *common]
            if args.web_conn_max_age is not None:
                portal += ["--web-conn-max-age", str(args.web_conn_max_age)]
            hub = ["--launches", str(k), "--hub-db", args.hub_db, *common]
            results[k] = {"portal": [], "jupyterhub": []}
            for r in range(args.repeats):
                order = [("portal", "bench.classstart", portal), ("jupyterhub", "bench.jupyterhub", hub)]
                if r % 2:
                    order.reverse()
                print(f"K = {k}, repeat {r + 1} of {args.repeats}", flush=True)
                for name, module, options in order:
                    results[k][name].append(run_bench(module, options))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

    print()
    print(
        f"side by side, median of {args.repeats} run(s) each, alternating order, start delay {args.start_delay:g} s, "
        f"driver {args.driver}:"
    )
    print(f"  how: {METHOD.format(period=args.poll_period)}")
    print(f"  databases: the portal PostgreSQL, JupyterHub {HUB_DATABASE_NAMES[args.hub_db]}")
    summary = {}
    for k, runs in results.items():
        p = [seconds(f, "time_to_all_running") for f in runs["portal"]]
        j = [seconds(f, "time_to_all_running") for f in runs["jupyterhub"]]
        pm, jm = statistics.median(p), statistics.median(j)
        ratio = pm / jm if math.isfinite(pm) and math.isfinite(jm) and jm > 0 else math.nan
        p50p = statistics.median(seconds(f, "launch_to_running_p50") for f in runs["portal"])
        p50j = statistics.median(seconds(f, "launch_to_running_p50") for f in runs["jupyterhub"])
        p99p = statistics.median(seconds(f, "launch_to_running_p99") for f in runs["portal"])
        p99j = statistics.median(seconds(f, "launch_to_running_p99") for f in runs["jupyterhub"])
        servers = max(1, math.ceil(k / INSTANCES_PER_SERVER))
        where = f"{servers} fake node(s) for each" if args.driver == "kubernetes" else f"{servers} portal server(s)"
        print(f"  K = {k} ({where}):")
        print(f"    time to all running: portal {fmt(pm)}, JupyterHub {fmt(jm)}")
        print(f"      runs: portal {', '.join(fmt(x) for x in p)}; JupyterHub {', '.join(fmt(x) for x in j)}")
        for r, (fp, fj) in enumerate(zip(runs["portal"], runs["jupyterhub"], strict=True)):
            print(f"      run {r + 1}: portal {fmt_run(fp)}")
            print(f"             JupyterHub {fmt_run(fj)}")
        print(f"    launch -> running p50: portal {fmt(p50p)}, JupyterHub {fmt(p50j)}")
        print(f"    launch -> running p99: portal {fmt(p99p)}, JupyterHub {fmt(p99j)}")
        print(f"    HTTP statuses: portal {[f.get('http_statuses') for f in runs['portal']]}")
        print(f"                   JupyterHub {[f.get('http_statuses') for f in runs['jupyterhub']]}")
        print(f"    portal / JupyterHub time to all running: {'n/a' if math.isnan(ratio) else f'{ratio:.2f}'}")
        summary[k] = {"portal_median": pm, "jupyterhub_median": jm, "ratio": ratio}
        cpu = cpu_per_session(runs["portal"])
        if cpu:
            shown = ", ".join(f"{name} {ms:.1f}" for name, ms in cpu.items())
            print(f"    the portal's CPU per session, median of its runs (ms, polling included): {shown}")
            summary[k]["cpu_ms_per_session"] = cpu
        if args.driver == "simulator" and k in TARGETS:
            met = "met" if pm <= TARGETS[k] else "MISSED"
            print(f"    target: all running <= {TARGETS[k]:g} s: {met}")
            summary[k]["target_met"] = pm <= TARGETS[k]
    print(f"side by side took {time.monotonic() - began:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "summary": summary}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
