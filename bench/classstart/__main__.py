"""``python -m bench.classstart``: the run, its report, and exit 0 when it passed."""

from __future__ import annotations

import sys

from bench.classstart.report import passed
from bench.classstart.run import parse_args, run
from bench.harness import bench_main


def main(argv: list[str] | None = None) -> int:
    """0 when every lab ran, then stopped with nothing left and every allocation released; else 1."""
    return bench_main(run, parse_args(argv), passed=passed, interrupted="interrupted; everything started was stopped and removed")


if __name__ == "__main__":
    sys.exit(main())
