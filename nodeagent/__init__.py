"""The node agent: one per NPU server, the portal's only way to the node (``python -m nodeagent``).

It imports nothing from Django (it runs on the node without the portal; tests/agent enforces it).
``drivers`` reads and changes the node, ``server`` serves the HTTP JSON API and Prometheus metrics,
``client`` is what the portal uses to call it, ``parsers`` reads the vendor CLIs' text.
"""
