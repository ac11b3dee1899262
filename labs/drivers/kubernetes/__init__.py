"""The Kubernetes cluster driver: pure object builders, device profiles and the official client."""

from labs.drivers.kubernetes.driver import KubernetesDriver

__all__ = ["KubernetesDriver"]
