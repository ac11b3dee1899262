"""One scrape of the portal's /metrics at scale on PostgreSQL: a large, busy cluster with a history.

    .venv/bin/python -m bench.metrics_scale

Creates its own PostgreSQL database (bench_metrics_<run>, dropped at the end) and claims a Redis
database number (nothing is queued there; it is emptied and released at the end). Django runs
in this process with portal.settings (DATABASE_URL = the temp database, a generated SECRET_KEY
and METRICS_TOKEN).

Data: the cluster of ``bench.pass_scale`` (--nodes nodes x 8 Ascend 910B, --live running
sessions with live allocations over 40 courses, --queued queued sessions of one more course),
of which the last --recent were admitted within the past 10 minutes after waits of up to 2
minutes; then, written in SQL, --history ended sessions with their released allocations (the
term so far) and --repair-events repair events of every kind; 1 % of the nodes drained, 1 %
unavailable, 1 % of the cards marked unhealthy. Then VACUUM ANALYZE, as autovacuum would have by then.

Timed: ``GET /metrics`` through the view, as Daphne calls it (token check, every query, the
text exposition), --repeat times (median reported), and each read of ``labs.selectors.metrics``
alone, so the slow part is named.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta

from bench.harness import (
    Resources,
    bench_main,
    new_token,
    portal_in_process,
    run_id,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.metrics_scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of 8 x 910B 64 GiB, default 1000")
    parser.add_argument("--live", type=int, default=40_000, help="running sessions with a live allocation, default 40000")
    parser.add_argument("--queued", type=int, default=128, help="queued sessions of one course, default 128")
    parser.add_argument("--recent", type=int, default=2_000, help="live sessions admitted in the last 10 minutes, default 2000")
    parser.add_argument("--history", type=int, default=1_000_000, help="ended sessions (released allocations), default 1000000")
    parser.add_argument("--repair-events", type=int, default=500_000, help="repair events, default 500000")
    parser.add_argument("--repeat", type=int, default=5, help="scrapes timed (median printed), default 5")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    if args.nodes < 1 or min(args.live, args.queued, args.recent, args.history, args.repair_events) < 0 or args.repeat < 1:
        parser.error("--nodes and --repeat must be >= 1, the others >= 0")
    if args.recent > args.live:
        parser.error("--recent cannot exceed --live")
    if args.live + args.queued > args.nodes * 8 * 16:
        parser.error("more small instances than the cards can hold (16 per card)")
    return args


def add_history(*, recent: int, history: int, repair_events: int) -> None:
    """Recent admissions among the live sessions, ended sessions, repair events and unavailable nodes, in SQL."""
    from django.db import connection

    with connection.cursor() as cursor:
        # Every running session was admitted an hour ago, after a minute's wait; then the newest
        # `recent` of them within the last 10 minutes, after a wait of up to 2.
        cursor.execute(
            "UPDATE labs_labsession SET admitted_at = now() - interval '1 hour', created_at = now() - interval '61 minutes'"
            " WHERE state = 'running'"
        )
        cursor.execute(
            """
            UPDATE labs_labsession s SET admitted_at = t.admitted, created_at = t.admitted - random() * interval '120 seconds'
            FROM (SELECT id, now() - random() * interval '600 seconds' AS admitted
                  FROM labs_labsession WHERE state = 'running' LIMIT %s) t
            WHERE s.id = t.id
            """,
            [recent],
        )
        # The term so far: ended sessions over the last 100 days, each with its released allocation.
        cursor.execute(
            """
            INSERT INTO labs_labsession (id, student_id, course_id, template_id, state, end_state, reason_code,
                reason_params, version, created_at, admitted_at, started_at, running_at, stopping_at, ended_at,
                access_url, secret, driver_ref, create_attempts, extensions_used, activity)
            SELECT gen_random_uuid(), s.student_id, s.course_id, s.template_id,
                   CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'stopped' END, '', '', '{}', 6,
                   t, t + interval '3 seconds', t + interval '4 seconds', t + interval '6 seconds',
                   t + interval '2 hours', t + interval '2 hours 5 seconds', '', md5(g::text), '', 0, 0, '{}'
            FROM generate_series(1, %s) g
            CROSS JOIN LATERAL (SELECT now() - interval '100 days' + g * (interval '100 days' / %s) AS t) ts
            CROSS JOIN (SELECT student_id, course_id, template_id FROM labs_labsession WHERE state = 'running' LIMIT 1) s
            """,
            [history, max(history, 1)],
        )
        cursor.execute(
            """
            INSERT INTO labs_allocation (session_id, card_id, course_id, core_percent, memory_mib, scenario, entity_id,
                borrowed, created_at, released_at)
            SELECT s.id, c.min_id + (row_number() OVER ()) % c.n, s.course_id, 5, 4096, 'development', '', false,
                   s.admitted_at, s.ended_at
            FROM labs_labsession s, (SELECT min(id) AS min_id, count(*) AS n FROM labs_card) c
            WHERE s.state IN ('stopped', 'failed')
            """
        )
        cursor.execute(
            """
            INSERT INTO labs_repairevent (created_at, kind, node_id, entity_id, message)
            SELECT now() - interval '100 days' + g * (interval '100 days' / %s),
                   (ARRAY['residual_seen', 'residual_unregistered', 'orphan_deleted', 'session_bound', 'session_failed',
                          'node_unavailable', 'node_available', 'card_changed', 'card_rebound', 'card_totals',
                          'guarantee_breach', 'repair_failed'])[1 + g %% 12],
                   n.min_id + g %% n.n, '', 'bench'
            FROM generate_series(1, %s) g, (SELECT min(id) AS min_id, count(*) AS n FROM labs_node) n
            """,
            [max(repair_events, 1), repair_events],
        )
        cursor.execute("UPDATE labs_node SET drained = true, drain_reason = 'bench', drained_at = now() WHERE id % 100 = 0")
        cursor.execute("UPDATE labs_card SET disabled = true, disabled_reason = 'bench' WHERE id % 100 = 0")
        cursor.execute("UPDATE labs_node SET available = false, unavailable_reason = 'agent unreachable' WHERE id % 100 = 1")


def run(args: argparse.Namespace) -> dict:
    rid = run_id()
    res = Resources()
    try:
        token = new_token()
        started = time.monotonic()
        portal_in_process(res, "metrics", rid, METRICS_TOKEN=token)
        from django.db import connection
        from django.test import RequestFactory
        from django.utils import timezone

        from bench.pass_scale import build
        from labs import metrics
        from labs.selectors import metrics as ledger

        build(args.nodes, args.live, args.queued)
        add_history(recent=args.recent, history=args.history, repair_events=args.repair_events)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        print(
            f"set-up ({args.nodes:,} nodes, {args.live:,} live allocations, {args.queued} queued, {args.recent:,} recent "
            f"admissions, {args.history:,} ended sessions, {args.repair_events:,} repair events): "
            f"{time.monotonic() - started:.1f} s",
            flush=True,
        )
        request = RequestFactory().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
        times, size, samples = [], 0, 0
        for _ in range(args.repeat):
            t = time.perf_counter()
            response = metrics.metrics(request)
            times.append(time.perf_counter() - t)
            assert response.status_code == 200, response.status_code
            size = len(response.content)
            samples = sum(1 for line in response.content.splitlines() if line and not line.startswith(b"#"))
        now = timezone.now()
        reads = {
            "card_use": ledger.card_use,
            "node_statuses": ledger.node_statuses,
            "failed_sessions": ledger.failed_sessions,
            "open_sessions_by_course": ledger.open_sessions_by_course,
            "admissions_since (5 min)": lambda: ledger.admissions_since(now - timedelta(seconds=300)),
            "repair_event_totals": ledger.repair_event_totals,
            "guarantee_breaches_since (5 min)": lambda: ledger.guarantee_breaches_since(now - timedelta(seconds=300)),
        }
        read_seconds = {}
        for name, read in reads.items():
            runs = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                read()
                runs.append(time.perf_counter() - t)
            read_seconds[name] = statistics.median(runs)
        median = statistics.median(times)
        print(f"GET /metrics on PostgreSQL: median {median:.3f} s of {args.repeat} (min {min(times):.3f}, max {max(times):.3f})")
        print(f"  {samples:,} samples, {size / 1e6:.1f} MB of text")
        for name, seconds in read_seconds.items():
            print(f"  {name}: median {seconds * 1000:.0f} ms")
        return {
            "bench": "metrics_scale",
            "nodes": args.nodes,
            "live": args.live,
            "history": args.history,
            "repair_events": args.repair_events,
            "scrape_seconds": times,
            "scrape_seconds_median": median,
            "samples": samples,
            "bytes": size,
            "read_seconds_median": read_seconds,
        }
    finally:
        res.close()


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
