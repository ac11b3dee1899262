"""The node agent: one per NPU server, the portal's only way to the node (``python -m nodeagent``).

It imports nothing from Django or the portal (it runs on the node without them; tests/agent
enforces it); of ``labs`` only the pure ``labs.domain`` (the share rule and the FlexNPU limits).
``cards`` reads and changes the node's cards, ``server`` serves the HTTP JSON API and Prometheus
metrics, ``client`` is what the portal uses to call it, ``parsers`` reads the vendor CLIs' text.
"""
