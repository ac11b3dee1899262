"""``python -m nodeagent.parsers``: an operator's check of a saved vendor CLI output on a real node."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from nodeagent.parsers.flexnpu_smi import parse_flexnpu_smi_info
from nodeagent.parsers.npu_smi import NpuSmiInfo, chip_type, parse_npu_smi_board, parse_npu_smi_device_share, parse_npu_smi_info
from nodeagent.parsers.text import ParseError

PARSERS = {
    "flexnpu-smi": parse_flexnpu_smi_info,
    "npu-smi": parse_npu_smi_info,
    "npu-smi-board": parse_npu_smi_board,
    "npu-smi-device-share": parse_npu_smi_device_share,
}


def main(argv: list[str] | None = None) -> int:
    """``python -m nodeagent.parsers flexnpu-smi|npu-smi|npu-smi-board FILE`` (``-`` reads standard input)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in PARSERS:
        print(
            "usage: python -m nodeagent.parsers flexnpu-smi|npu-smi FILE  (saved '<command> info' output)\n"
            "       python -m nodeagent.parsers npu-smi-board FILE  (saved 'npu-smi info -t board -i 0' output)\n"
            "       python -m nodeagent.parsers npu-smi-device-share FILE  (saved 'npu-smi info -t device-share' output)",
            file=sys.stderr,
        )
        return 2
    command, path = args
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        print(f"cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        parsed = PARSERS[command](data)
    except ParseError as exc:
        print(f"{command} info: parse error: {exc}", file=sys.stderr)
        return 1
    if isinstance(parsed, str):
        print(json.dumps({"firmware_version": parsed}))
        return 0
    if isinstance(parsed, dict):
        print(json.dumps({"device_share": {str(npu): on for npu, on in parsed.items()}}))
        return 0
    if isinstance(parsed, NpuSmiInfo):
        for chip in parsed.chips:
            print(json.dumps({"chip": asdict(chip), "chip_type": chip_type(chip.name, chip.memory_total_mib)}))
        for process in parsed.processes:
            print(json.dumps({"process": asdict(process)}))
        npus = len({chip.npu_id for chip in parsed.chips})
        summary = f"parsed {npus} NPU(s), {len(parsed.chips)} chip(s), {len(parsed.processes)} process(es)"
        versions = f" (npu-smi {parsed.npu_smi_version}, driver {parsed.version})" if parsed.version else ""
        print(f"{command} info: {summary}{versions}", file=sys.stderr)
        return 0
    for record in parsed:
        print(json.dumps(asdict(record)))
    print(f"{command} info: parsed {len(parsed)} instance(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
