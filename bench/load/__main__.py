"""``python -m bench.load``: set up, run the users, report, and exit 0 when every target is met."""

from __future__ import annotations

import sys
import time

from bench.harness import raise_keyboard_interrupt_on_sigterm, write_json
from bench.load.plan import parse_args
from bench.load.run import run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_keyboard_interrupt_on_sigterm()
    began = time.monotonic()
    try:
        summary = run(args)
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped and removed", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"load: {exc}", file=sys.stderr)
        return 2
    write_json(args.json, summary)
    print(f"bench.load took {time.monotonic() - began:.0f} s")
    if summary["window_seconds"] is None:
        return 2
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
