"""The lifecycle controller: one loop that makes the cluster do what the ledger says.

Desired state is the ledger (sessions and their allocations), observed state is one
``observe()`` of the cluster driver; ``labs.domain.lifecycle.decide`` compares them and this
module carries out what it decides. One run (``controller_run``):

1. the allocation pass admits and places queued sessions (``labs.services.allocation``);
2. the driver is observed once — every instance, one call;
3. the open sessions are read from the ledger (after the observation, so an instance is never
   older than the ledger row that asked for it);
4. ``decide`` returns the actions; driver calls (create, delete) run side by side in a small
   thread pool, every ledger change is a conditional UPDATE, and pages hear of the changes
   once, at the end, one message per student and course;
5. the node agents hear of the instances the round recorded or ended (register, unregister) —
   after the round has let go of the lock, every node at once, each call with a short deadline
   (``labs.services.agents.instance_calls_make``), so a hung agent holds up no other node.

It is woken on demand (a launch, a stop: ``labs.dispatch.controller_wake``) and by Celery beat
every ``LAB_CONTROLLER_SECONDS``. One run at a time: a run that finds another one running
returns at once, and the running one goes round again if a wake arrived meanwhile (a
generation counter read before and after), so no wake is lost and a burst of launches never
queues hundreds of blocked runs. Every action is idempotent and every state change
conditional, so a worker killed mid-run, a redelivered task or two runs at once change
nothing: the next run sees the same ledger and the same cluster and finishes the job.

The slower half of observation — what each node's agent reports (cards, instances, NPU use) —
is ``labs.services.reconcile``, on its own beat period.
"""

from labs.services.controller.creates import allocation_rebind, launch_spec, template_launch_fields, with_jupyter_token
from labs.services.controller.execute import ControllerReport, answers_collect
from labs.services.controller.rounds import controller_run, reconcile_once, sessions_shutdown

__all__ = [
    "ControllerReport",
    "allocation_rebind",
    "answers_collect",
    "controller_run",
    "launch_spec",
    "reconcile_once",
    "sessions_shutdown",
    "template_launch_fields",
    "with_jupyter_token",
]
