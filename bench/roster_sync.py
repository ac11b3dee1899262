"""The LMS roster sync at class size: PUT /api/v1/courses/<id>/roster/ with 5,000 members, twice.

    .venv/bin/python -m bench.roster_sync [--members 5000]

Creates its own PostgreSQL database (bench_roster_<run>, dropped at the end) and claims a Redis
database number (the API's throttle counts there). Django runs in this process with
portal.settings; requests go through Django's test client, so the whole stack runs (token
check, throttle, validation, the sync, the JSON answer) but no network.

Timed: the first PUT (every member new: accounts made, enrolled) and the second with the same
body (every row unchanged). Printed: both times, rows written by each, queries of each. The
second must write nothing; the exit status is 1 when it does.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from bench.harness import (
    Resources,
    portal_in_process,
    raise_keyboard_interrupt_on_sigterm,
    run_id,
)


@dataclass(frozen=True)
class SyncFigures:
    seconds: float
    queries: int
    writes: int  # INSERT, UPDATE and DELETE statements, other than the token's last-used time
    counts: dict[str, int]


def roster_body(instructor: str, members: int) -> dict:
    rows = [{"username": instructor, "role": "instructor"}]
    rows += [{"username": f"s{i:05d}", "email": f"s{i:05d}@uni.example", "first_name": "Student"} for i in range(members)]
    return {"members": rows}


def timed_sync(client, url: str, token: str, body: dict) -> SyncFigures:
    """One PUT of ``body`` to ``url`` with ``token``, timed, its queries counted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    connection.queries_log.clear()
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = client.put(url, data=body, content_type="application/json", headers={"Authorization": f"Bearer {token}"})
        seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"PUT {url}: {response.status_code} {response.content[:500]!r}")
    writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().split()[0].upper() in ("INSERT", "UPDATE", "DELETE") and "api_apitoken" not in q["sql"]
    ]
    data = response.json()
    counts = {k: data[k] for k in ("added", "updated", "unchanged", "removed", "rejected")}
    return SyncFigures(seconds, len(queries.captured_queries), len(writes), counts)


def run(members: int) -> int:
    rid = run_id()
    res = Resources()
    try:
        portal_in_process(res, "roster", rid, connection_limit=5)
        from django.contrib.auth import get_user_model
        from django.test import Client

        from api.scopes import SCOPES
        from api.services import token_create
        from labs.models import Affiliation, Course, Enrollment, Institution
        from labs.services.affiliations import affiliation_ensure

        institution = Institution.objects.create(name="Bench University", slug="bench")
        course = Course.objects.create(institution=institution, code="BIG101", title="Big class", term="bench")
        teacher = get_user_model().objects.create(username="teacher")
        Enrollment.objects.create(user=teacher, course=course, role=Enrollment.Role.INSTRUCTOR)
        affiliation_ensure(user_ids=[teacher.pk], institution=institution, source=Affiliation.Source.ROLE)
        _token, token = token_create(institution=institution, name="bench", scopes=list(SCOPES))
        client = Client(SERVER_NAME="localhost")
        url = f"/api/v1/courses/{course.pk}/roster/"
        body = roster_body("teacher", members)
        first = timed_sync(client, url, token, body)
        second = timed_sync(client, url, token, body)
        print(
            f"roster sync, {members:,} members: first PUT {first.seconds:.2f} s ({first.counts['added']:,} added, "
            f"{first.queries:,} queries, {first.writes:,} writes)",
            flush=True,
        )
        print(
            f"roster sync, {members:,} members: same PUT again {second.seconds:.2f} s ({second.counts['unchanged']:,} "
            f"unchanged, {second.queries:,} queries, {second.writes} writes)",
            flush=True,
        )
        if second.writes or second.counts["unchanged"] != members + 1:
            print("FAIL: the second sync changed something", file=sys.stderr)
            return 1
        return 0
    finally:
        res.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.roster_sync", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--members",
        type=int,
        default=4999,
        help="students in the roster besides the instructor, default 4999 (5,000 rows: the limit)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.members <= 4999:
        parser.error("--members must be 1..4999 (the body holds at most 5,000 rows, one is the instructor)")
    raise_keyboard_interrupt_on_sigterm()
    return run(args.members)


if __name__ == "__main__":
    sys.exit(main())
