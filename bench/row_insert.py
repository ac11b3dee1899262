"""A launch's session row: ``LabSession.objects.create`` against ``labs.services.rows.row_insert``.

    .venv/bin/python -m bench.row_insert [--rows 1000] [--rounds 6]

In this process, on a migrated PostgreSQL database of its own (``bench.harness.portal_in_process``,
the world of ``bench.request_cost``): ``--rounds`` rounds, each inserting ``--rows`` queued
sessions (the launch's fields, a new secret and queue time each) the ORM's way and then
``row_insert``'s, each batch in a transaction rolled back after. Printed: the CPU of this process
per row (``time.process_time``: the web process's share; PostgreSQL's is the same statement
either way), the median of the rounds for each and their ratio, with the machine's reference loop.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import time
from datetime import timedelta

from bench.harness import Resources, portal_in_process, reference_loop_ms, run_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="sessions inserted each way per round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds, each inserting --rows both ways")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.rounds < 1:
        parser.error("--rows and --rounds must be at least 1")
    res = Resources()
    try:
        portal_in_process(res, "rowinsert", run_id())
        from bench import request_cost

        world = request_cost.build_world(students=10)
        return measure(world, rows=args.rows, rounds=args.rounds)
    finally:
        res.close()


def measure(world: dict, *, rows: int, rounds: int) -> int:
    from django.db import transaction
    from django.utils import timezone

    from labs.domain.reasons import Reason
    from labs.models import LabSession
    from labs.services.rows import row_insert
    from labs.services.sessions import reason_fields

    course = world["course"]
    some = LabSession.objects.filter(course=course).first()
    student_id, template_id = some.student_id, some.template_id

    def fields() -> dict:
        return {
            "student_id": student_id,
            "course_id": course.pk,
            "template_id": template_id,
            "state": "queued",
            "queue_at": timezone.now() + timedelta(seconds=1),
            "secret": secrets.token_urlsafe(32),
            **reason_fields(Reason.of("session.queued")),
        }

    ways = {
        "objects.create": lambda: LabSession.objects.create(**fields()),
        "row_insert": lambda: row_insert(LabSession(**fields())),
    }
    per_row: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, insert in ways.items():
            with transaction.atomic():
                began = time.process_time()
                for _ in range(rows):
                    insert()
                per_row[name].append((time.process_time() - began) / rows * 1e6)
                transaction.set_rollback(True)
    orm, written = (statistics.median(per_row[name]) for name in ways)
    print(f"a launch's session row, {rows} rows x {rounds} rounds, CPU of this process per row (median; the rounds):")
    for name, median in zip(ways, (orm, written), strict=True):
        print(f"  {name:<15} {median:7.1f} us  ({', '.join(f'{v:.0f}' for v in per_row[name])})")
    print(f"  ratio row_insert / objects.create: {written / orm:.2f}")
    print(f"  reference loop: {reference_loop_ms():.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
