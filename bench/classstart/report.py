"""The class start's figures printed, and whether they pass."""

from __future__ import annotations

import argparse
import os

from bench.classstart.portal import INSTANCES_PER_SERVER
from bench.harness import fmt_seconds
from bench.poll import fmt_machine, fmt_polling

WEB_LISTEN = {
    "ports": "each on a port of its own, the requests spread over them in turn (as a Service)",
    "socket": "accepting on one socket",
}


def report(f: dict, args: argparse.Namespace) -> None:
    capacity = INSTANCES_PER_SERVER * args.servers
    where = "simulator" if args.driver == "simulator" else "Kubernetes driver, real control plane, node simulator"
    print(
        f"portal class start: {f['launches']} launches, {args.servers} server(s) x 8 x 910B 64 GiB, "
        f"{args.workers} worker(s) x concurrency {args.concurrency} (prefork), {where}, start {args.start_delay:g} s; "
        f"{getattr(args, 'web_processes', 1)} Daphne process(es), {WEB_LISTEN[getattr(args, 'web_listen', 'socket')]}"
    )
    print("  the portal's database: PostgreSQL (a database of its own on 127.0.0.1:5432); API token: issued by the portal")
    print(f"  running: {fmt_polling(f)}")
    if f["launches"] > capacity:
        print(f"  note: only {capacity} small instances fit on {args.servers} server(s); the rest wait for room")
    if args.web_conn_max_age is not None:
        print(f"  Daphne's CONN_MAX_AGE set to {args.web_conn_max_age} s (--web-conn-max-age)")
    print(
        f"  submitting: {f['launches']} POSTs from {args.threads} threads took {f['submit_seconds']:.2f} s"
        + (f" (each answered in p50 {fmt_seconds(f['post_p50'])}, p99 {fmt_seconds(f['post_p99'])})" if "post_p50" in f else "")
    )
    print(f"  HTTP statuses: {f['http_statuses']}")
    if f["retry_statuses"]:
        print(f"  launches pressed again 1 s after a server error: {f['retry_statuses']}")
    if f["time_to_all_running"] is not None:
        print(f"  time to all running: {f['time_to_all_running']:.2f} s ({f['running']} of {f['launches']} running)")
    else:
        stuck = ", ".join(f"{state}: {n}" for state, n in sorted(f["stuck"].items())) or "none"
        print(
            f"  NOT all running: {f['running']} of {f['launches']} running "
            f"({f['sessions']} sessions created); stuck by state: {stuck}; timeout {args.timeout:g} s"
        )
        for why, n in f["failures"].items():
            print(f"    {n} ended with: {why}")
        if f["time_to_last_running"] is not None:
            print(f"  the last of those {f['running']} was running after {f['time_to_last_running']:.2f} s")
    print(
        f"  launch -> running per session: p50 {fmt_seconds(f['launch_to_running_p50'])}, "
        f"p99 {fmt_seconds(f['launch_to_running_p99'])}"
    )
    print(
        f"  queued -> admitted p50 {fmt_seconds(f['queued_to_admitted_p50'])}; "
        f"admitted -> running p50 {fmt_seconds(f['admitted_to_running_p50'])} "
        f"(admitted -> created {fmt_seconds(f['admitted_to_started_p50'])}, "
        f"created -> running {fmt_seconds(f['started_to_running_p50'])})"
    )
    if f.get("end_admitted") is not None:
        print(
            f"  after the last launch's answer: the last session admitted {fmt_after(f['end_admitted'])} (the class in "
            f"{f['admitting_passes']} allocation passes, the last admitting {f['last_pass_admitted']}), "
            f"the last create sent {fmt_after(f['end_create_sent'])}, the last running in the portal "
            f"{fmt_after(f['end_running'])}, seen running through the API {fmt_after(f['end_seen'])}"
        )
    if "bound_to_ready_p50" in f:
        print(
            f"  on the cluster, p50: create sent -> pod bound to its node {fmt_seconds(f['started_to_bound_p50'])}, "
            f"bound -> Ready {fmt_seconds(f['bound_to_ready_p50'])} (start {args.start_delay:g} s), "
            f"Ready -> running in the portal {fmt_seconds(f['ready_to_running_p50'])}"
        )
    print(
        f"  PostgreSQL connections to this run's database, most seen (sampled every 0.1 s): {f['peak_db_connections']}, "
        f"{f['db_connections_before']} open before the first launch, {f['db_connections_opened']} opened during the class start "
        f"(limit of the run's role {f['db_connection_limit']}; server max_connections {f['max_connections']})"
    )
    if f.get("cpu_ms_per_session"):
        ms = f["cpu_ms_per_session"]
        print(
            f"  the portal's CPU per session (utime + stime from /proc, first launch to the last lab running, / {f['launches']}):"
        )
        for name, value in ms.items():
            print(f"    {value:7.2f} ms  {name}")
        polling = f["polls"] * f["poll_cpu_ms"] / f["launches"]
        print(
            f"    of which the bench's polling, Daphne and PostgreSQL: about {polling:.2f} ms ({f['polls']} polls, "
            f"{f['poll_cpu_ms']:.1f} ms each, as 10 polls after the run cost)"
        )
        print(f"    {fmt_machine(f.get('machine_before'), f.get('machine_after'))}")
    if f.get("cpu_percent_of_one_core"):
        print("  CPU from the first launch to the last lab running, in % of one core (the machine has "
              f"{os.cpu_count()}):")  # fmt: skip
        for name, share in sorted(f["cpu_percent_of_one_core"].items(), key=lambda item: -item[1]):
            print(f"    {share:6.1f}  {name}")
    if "stop_statuses" in f:
        print(f"  stop: HTTP statuses {f['stop_statuses']}; ", end="")
        if f["time_to_all_stopped"] is None:
            stuck = ", ".join(f"{state}: {n}" for state, n in sorted(f["stopped_by_state"].items()))
            print(f"NOT all stopped ({stuck})")
        else:
            print(f"all stopped after {f['time_to_all_stopped']:.2f} s", end="")
            if f["time_to_nothing_left"] is not None:
                print(f", nothing of the class left in the API server after {f['time_to_nothing_left']:.2f} s")
            else:
                left = ", ".join(f"{n} {kind}" for kind, n in f["left_in_api_server"].items())
                print(f"; still in the API server at the timeout: {left}")
        print(f"  allocations not released: {f['unreleased_allocations']}")
    print(f"  machine: {fmt_machine(f.get('machine_before'), f.get('machine_after'))}")


def fmt_after(seconds: float | None) -> str:
    """Seconds after a moment, signed (a session admitted before the last launch's answer is negative)."""
    return "-" if seconds is None else f"{seconds:+.2f} s"


def passed(figures: dict) -> bool:
    cleared = figures.get("time_to_nothing_left", 0) is not None and not figures.get("unreleased_allocations")
    return figures["time_to_all_running"] is not None and cleared
