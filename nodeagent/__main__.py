"""Run the node agent: ``python -m nodeagent --driver simulated|flexnpu-smi [--host H] [--port P] [--node NAME]``.

``python -m nodeagent selftest [--probe]`` runs a lab's isolation self-test instead (``nodeagent.selftest``).

Every option has an environment equivalent (``AGENT_DRIVER``, ``AGENT_HOST``, ...; see ``--help``).
The bearer token comes from ``--token``, ``AGENT_TOKEN``, ``--token-file`` or ``AGENT_TOKEN_FILE``
(prefer a file: a command-line token shows in the process list); the agent refuses to start
without one. It serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading

from nodeagent.cards.base import NodeDriver
from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from nodeagent.cards.simulated import SimulatedDriver
from nodeagent.server import make_server

__all__ = ["main", "make_server"]

logger = logging.getLogger("nodeagent")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m nodeagent", description="The NPU Lab Portal node agent.")
    parser.add_argument("--driver", choices=["simulated", "flexnpu-smi"], default=env("AGENT_DRIVER"), help="AGENT_DRIVER")
    parser.add_argument("--host", default=env("AGENT_HOST", "127.0.0.1"), help="AGENT_HOST (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=env("AGENT_PORT", "9410"), help="AGENT_PORT (default 9410; 0: any free)")
    parser.add_argument("--node", default=env("AGENT_NODE") or socket.gethostname(), help="AGENT_NODE (default: the host name)")
    parser.add_argument("--token", default=env("AGENT_TOKEN"), help="AGENT_TOKEN")
    parser.add_argument("--token-file", default=env("AGENT_TOKEN_FILE"), help="AGENT_TOKEN_FILE")
    simulated = parser.add_argument_group("simulated driver")
    simulated.add_argument("--cards", type=int, default=env("AGENT_CARDS", "8"), help="AGENT_CARDS (default 8)")
    simulated.add_argument(
        "--card-memory-mib", type=int, default=env("AGENT_CARD_MEMORY_MIB", "65536"), help="AGENT_CARD_MEMORY_MIB"
    )
    simulated.add_argument("--chip-type", default=env("AGENT_CHIP_TYPE", "Ascend910B"), help="AGENT_CHIP_TYPE")
    real = parser.add_argument_group("flexnpu-smi driver")
    real.add_argument("--flexnpu-smi", default=env("AGENT_FLEXNPU_SMI", "flexnpu-smi"), help="AGENT_FLEXNPU_SMI")
    real.add_argument("--npu-smi", default=env("AGENT_NPU_SMI", "npu-smi"), help="AGENT_NPU_SMI")
    timeout = env("AGENT_COMMAND_TIMEOUT_SECONDS", "10")
    real.add_argument("--command-timeout", type=float, default=timeout, help="AGENT_COMMAND_TIMEOUT_SECONDS (default 10)")
    cache = env("AGENT_NPU_SMI_CACHE_SECONDS", "2")
    real.add_argument("--npu-smi-cache", type=float, default=cache, help="AGENT_NPU_SMI_CACHE_SECONDS (default 2; 0: never)")
    args = parser.parse_args(argv)
    if args.driver not in ("simulated", "flexnpu-smi"):
        parser.error(f"choose a driver: --driver simulated|flexnpu-smi (or AGENT_DRIVER), got {args.driver!r}")
    args.token = read_token(parser, args)
    return args


def read_token(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    token = (args.token or "").strip()
    if not token and args.token_file:
        try:
            with open(args.token_file) as file:
                token = file.read().strip()
        except OSError as exc:
            parser.error(f"cannot read the token file {args.token_file}: {exc.strerror or exc}")
    if not token:
        parser.error("refusing to start without a token: set AGENT_TOKEN or AGENT_TOKEN_FILE, or pass --token/--token-file")
    return token


def build_driver(args: argparse.Namespace) -> NodeDriver:
    if args.driver == "simulated":
        return SimulatedDriver(cards=args.cards, chip_type=args.chip_type, memory_mib=args.card_memory_mib, node_name=args.node)
    return FlexnpuSmiDriver(
        binary=args.flexnpu_smi,
        npu_smi=args.npu_smi,
        timeout_seconds=args.command_timeout,
        npu_smi_cache_seconds=args.npu_smi_cache,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["selftest"]:
        from nodeagent import selftest

        return selftest.main(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=os.environ.get("AGENT_LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        driver = build_driver(args)
    except ValueError as exc:
        print(f"python -m nodeagent: {exc}", file=sys.stderr)
        return 2
    server = make_server(driver, args.token, host=args.host, port=args.port, node=args.node)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, name="agent-http", daemon=True)
    thread.start()
    logger.info("node agent for %s (%s driver) listening on %s", args.node, driver.name, server.url)
    while not stop.wait(1):
        pass
    logger.info("stopping")
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
