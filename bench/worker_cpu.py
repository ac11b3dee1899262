"""The Celery workers' CPU per session of a class start, over several runs of ``bench.classstart``.

    .venv/bin/python -m bench.worker_cpu --runs 3 -- --launches 1024 --servers 8

Each run is ``bench.classstart`` with the arguments after ``--``, in a process of its own (Django
is set up once per process, on the run's own database). Its CPU meter reads ``/proc``
from the first launch to the last lab running; here the workers' share of one core is turned
back into CPU seconds (times the meter's window) and divided by the class size. Printed per run
with the load average before it, then the median and the spread. The machine is shared: read
the spread and the load before the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from bench.classstart import run as classstart

WORKERS = "Celery workers"


class _TimedMeter:
    """The class start's meter, also keeping how long it measured."""

    def __init__(self, meter) -> None:
        self.meter = meter
        self.seconds = 0.0
        self._began = 0.0

    def start(self) -> None:
        self.meter.start()
        self._began = self.meter.before[0]

    def stop(self) -> None:
        self.meter.stop()
        began = self._began
        self.seconds = self.meter.read()[0] - began  # the window stop() measured, closely

    @property
    def shares(self) -> dict[str, float]:
        return self.meter.shares


def one_run(argv: list[str]) -> tuple[float, int, float, str]:
    """Worker CPU ms per session, the class size, the run's seconds, the load average before it."""
    load = Path("/proc/loadavg").read_text().split()[:3]
    meters: list[_TimedMeter] = []
    make_meter = classstart.cpu_meter

    def timed(*a, **k):
        meters.append(_TimedMeter(make_meter(*a, **k)))
        return meters[-1]

    classstart.cpu_meter = timed
    try:
        args = classstart.parse_args(argv)
        figures = classstart.run(args)
    finally:
        classstart.cpu_meter = make_meter
    meter = meters[-1]
    counted = getattr(meter.meter, "ms", None)  # a meter that counts CPU milliseconds itself
    if counted and WORKERS in counted:
        cpu_seconds = counted[WORKERS] / 1000.0
    else:
        cpu_seconds = figures["cpu_percent_of_one_core"][WORKERS] / 100.0 * meter.seconds
    return cpu_seconds * 1000.0 / args.launches, args.launches, meter.seconds, " ".join(load)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, theirs = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(
        prog="python -m bench.worker_cpu", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="class starts to run, default 3")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a run, in this process
    args = parser.parse_args(ours)
    if args.one:
        ms, launches, seconds, load = one_run(theirs)
        print(RESULT + json.dumps({"ms": ms, "launches": launches, "seconds": seconds, "load": load}))
        return 0
    per_session = []
    for i in range(args.runs):
        out = subprocess.run(
            [sys.executable, "-m", "bench.worker_cpu", "--one", "--", *theirs], capture_output=True, text=True, check=False
        )
        lines = [line for line in out.stdout.splitlines() if line.startswith(RESULT)]
        if not lines:
            print(out.stdout + out.stderr, file=sys.stderr)
            print(f"run {i + 1} failed (exit {out.returncode})", file=sys.stderr)
            return 1
        r = json.loads(lines[-1][len(RESULT) :])
        per_session.append(r["ms"])
        print(
            f"run {i + 1}: workers {r['ms']:.2f} ms CPU per session ({r['launches']} sessions, "
            f"{r['seconds']:.1f} s measured; load before {r['load']})",
            flush=True,
        )
    print(
        f"Celery workers' CPU per session: median {statistics.median(per_session):.2f} ms "
        f"(min {min(per_session):.2f}, max {max(per_session):.2f}; {args.runs} runs); "
        f"load average now {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    return 0


RESULT = "worker_cpu: "


if __name__ == "__main__":
    sys.exit(main())
