"""``make chaos``: a class launching and stopping labs over HTTP while faults hit the portal's processes.

    .venv/bin/python -m bench.chaos                       # every fault (about 3 minutes on 2 cores)
    .venv/bin/python -m bench.chaos --only redis,postgres # the set-up, the class start and these faults
    .venv/bin/python -m bench.chaos --quick               # shorter outages, for development

Builds its own world and throws it away afterwards: its own PostgreSQL server (``initdb`` into a
temporary directory with the server binaries of this machine, on a free port; run as the
``postgres`` user when the harness runs as root), its own ``redis-server`` on a free port, a
temporary ``PORTAL_VAR_DIR``. So it can restart either server without touching anyone else's.
On them run two Daphne processes (one listening socket), two Celery workers (prefork x 4, as
``deploy/`` runs them), Celery beat and one simulated node agent per node, all with the
simulator driver (2 s starts, 1 s controller period, 5 s reconciler period).

The class: two nodes of 8 x 910B 64 GiB, one course, 200 students, four templates that each
reach one of FlexNPU's per-card caps: ``core`` (25 %, 8 GiB: four fill a card's AI Core),
``memory`` (5 %, 16 GiB: four fill its memory), ``small`` (5 %, 2 GiB: sixteen reach the
development instance cap) and ``inference`` (10 %, 4 GiB, inference: eight reach the inference
cap). The class start fills the first node template by template, so every cap is reached; the
faults then run on both nodes. Students log in once (a session cookie each) and do everything
else over HTTP through Daphne: ``POST /sessions/launch/`` and ``POST /sessions/<id>/stop/`` with
JSON answers, pressing again a second later after a 5xx or no answer, as a student would.

Each fault (``FAULTS``, in that order; ``--only`` picks some) starts a class burst — launches by
idle students and stops of running labs, all pressed at once from many threads — and lands
once every press is out, half of them are answered (or ``--lead`` s after the first, if that is
sooner) and 60 of them are starting or stopping, or sooner as the first of those 60 settles: a
portal ends a burst's stops together, in one step, within half a second on two cores (counted
again afterwards from the presses and the ledger's timestamps: fewer than 50 fails the run). A
fault that lasts meets a second burst half-way (the agent faults: once the portal has marked the
node unavailable; those launches must go to the other node). While it lasts and until its
sessions settle, the run records every press's HTTP status, whether a launch or stop answered
5xx was committed anyway, each launch's time to running and each stop's time to ended, and the
time from the fault clearing to the last of its sessions settling. A thread checks the ledger's
invariants every 0.5 s all along (per card: AI Core floors <= 100 %, memory <= the card's,
instances <= 16, or 8 with an inference instance; per node <= 128, or 64; an allocation exactly
for the sessions that hold one, released once, with one usage record; at most one open session
per student). After each fault it looks for leaks: simulator instances without a live session,
agent registrations without a live allocation, twice 1.5 s apart (a reconciler period apart
after an agent fault).

Printed: a table with one row per fault (in flight when it landed, sessions, failed, stuck,
lost, leaked, 5xx, 5xx answers to committed requests, start and stop p99 during it, settle time
after it, each against ``bench.chaos.report.TARGETS``), every failed check, and PASS or FAIL.
The exit code is 0 on PASS, 1 on FAIL (any target missed, timing ones included), 2 when the run
itself broke.
"""
