"""A local Kubernetes control plane with fake Ascend nodes, for the tests and for development.

``python -m labs.devcluster`` starts it; ``tests/kube`` uses it as a session fixture. The
binaries come from ``make controlplane`` (``labs.devcluster.binaries``).
"""
