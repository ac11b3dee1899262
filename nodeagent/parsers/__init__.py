"""Parsers for the text the vendor CLIs print: ``flexnpu-smi info`` (``flexnpu_smi``) and
``npu-smi info`` with its ``-t board`` and ``-t device-share`` views (``npu_smi``).

A parser returns the whole table or raises ``ParseError`` (line number and a short reason): on
empty output, output cut short, binary junk or a table whose columns are not the ones expected.
It never returns part of a table — the agent decides unregisters from this output, and an
instance missing from a half-read table must not look like one that is gone.

Both parsers take ``str`` or ``bytes`` (bytes must be UTF-8) and require the output to end with
a newline: a CLI that finished printing always does.

``text`` holds what they share; ``python -m nodeagent.parsers`` (``__main__``) checks a saved output.
"""
