"""Run a command under the host limits the local driver can apply on one machine, then exec it.

    python -m labs.drivers.limits --memory-mib 4096 --nice 10 -- jupyter lab ...

``--memory-mib`` sets ``RLIMIT_AS`` (address space, per process: the server and each kernel it
starts inherit the same cap, so one runaway notebook fails its own allocation instead of
starving the machine); ``--nice`` lowers the CPU priority of the lab under the portal's.
Neither is a container limit: address space counts mapped but unused memory (set it well above
what the program keeps resident), it caps each process and not the lab's total, and niceness
shares the CPU rather than capping it. A separate process rather than ``preexec_fn`` because
``preexec_fn`` is unsafe in a threaded portal.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys


def apply(*, memory_mib: int | None, nice: int) -> None:
    """Cap this process's address space at ``memory_mib`` MiB (``None``: unchanged) and add ``nice``."""
    if memory_mib is not None:
        limit = memory_mib * 1024 * 1024
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if nice:
        os.nice(nice)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m labs.drivers.limits")
    parser.add_argument("--memory-mib", type=int, default=None)
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is required after --")
    if args.memory_mib is not None and args.memory_mib < 1:
        parser.error("--memory-mib must be a positive number of MiB")
    apply(memory_mib=args.memory_mib, nice=args.nice)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
