"""A node simulator: the fake nodes' kubelets, without containers (KWOK's idea, in Python).

What a kubelet tells the API server, and nothing it does on the host:

* registers each fake node (the Node, then its status: Ready, capacity, allocatable, addresses)
  and keeps its Lease in ``kube-node-lease`` renewed, so the node lifecycle controller of the
  real controller-manager sees a live node;
* watches the pods bound to its nodes: a new one goes to Pending/ContainerCreating at once and,
  ``start_delay_seconds`` later, to Running and Ready (pod IP, conditions, container statuses);
  each pod gets an address of its own from ``POD_NETWORK``, or every pod the one ``pod_ip``
  (a server on this machine that answers for all of them, as a benchmark's stub does);
* finishes the delete of a pod being deleted (a kubelet's last step: delete with grace 0);
* fails a pod on request (``fail_pod``, or the pod's ``FAILURE_ANNOTATION``): ``ErrImagePull``
  (waiting ``ErrImagePull``, then ``ImagePullBackOff``, with the kubelet's events) or
  ``OOMKilled`` (terminated ``OOMKilled``, exit code 137; with ``restartPolicy: Never`` the pod
  is Failed);
* restarts a pod's container once on request (``fail_pod`` with ``RestartOnce``: it ends with
  ``Error``, exit code 1, as a FlexNPU lab may while its instance initialises; ``OOMKilledOnce``:
  killed for memory), or every so many pods as they start (``restart_fraction``, e.g. 0.1: every
  tenth, as when a class's FlexNPU instances are created at once): terminated first, then,
  ``start_delay_seconds`` later, running and Ready again with ``restartCount`` 1 and the end as
  its ``lastState`` (with ``restartPolicy: Never`` the pod is Failed instead);
* restarts a node on request (``reboot_node``), as an unexpected reboot does: its status comes
  with a new ``nodeInfo.bootID`` and its NPU resources at 0 (the device plugin has not reported
  them yet), and each of its NPU pods (those asking for the profile's device) is Failed
  (``UnexpectedAdmissionError``, the kubelet's words for a pod whose devices it cannot allocate)
  — the CCE FlexNPU guide's "执行失败" after a restart; other pods are left running.
  ``devices_after_seconds`` later the NPU resources are back and, with ``pods_come_back``, each
  pod runs and is Ready again with one restart more;
* loses a node on request (``lose_node``): its lease is no longer renewed and its pods are left
  alone, so the controller-manager marks it NotReady after its grace period, as for a node that
  died;
* reports Ready again a running pod the node lifecycle controller marked not Ready (it does so to
  every pod of a node it finds NotReady, also when a lease renewal was only late on a busy
  machine, and only the kubelet lifts the mark), and every such pod of a lost node once it is
  back, as a kubelet's status manager does.

The simulator's threads: one renews leases (spread evenly over the renewal period, onto a pool of
their own, so a thousand nodes do not renew in one burst), one watches pods, one fires timed
steps onto a small pool that talks to the API server. Nodes register side by side on that pool.
"""


from labs.devcluster.simulator.node_simulator import NodeSimulator
from labs.devcluster.simulator.state import FAILURE_ANNOTATION, checked_pod_ip

__all__ = ["FAILURE_ANNOTATION", "NodeSimulator", "checked_pod_ip"]
