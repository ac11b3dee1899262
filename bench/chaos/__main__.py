"""``python -m bench.chaos``: the run, its set-up and teardown, and its exit code."""

from __future__ import annotations

import signal
import sys
import time

from bench.chaos.plan import parse_args, say
from bench.chaos.run import Chaos


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chaos = Chaos(args)

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    code = 2
    began = time.monotonic()
    try:
        code = chaos.run()
    except KeyboardInterrupt:
        say("interrupted")
        code = 130
    except SystemExit as exc:
        say(f"chaos: set-up failed: {exc}")
        code = 2
    finally:
        chaos.teardown(keep=args.keep or code != 0)
    say(f"make chaos took {time.monotonic() - began:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
