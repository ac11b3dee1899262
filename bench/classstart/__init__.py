"""Class start on the real portal: K students press Launch at once; how long until every lab runs?

    .venv/bin/python -m bench.classstart --launches 128

What runs, all on this machine and all real processes, each run with its own resources:
  - a new PostgreSQL database (bench_classstart_<run>, migrated here, dropped at the end) and a
    Redis database number of its own (claimed with SET NX like the test suite does, emptied and
    released at the end);
  - --web-processes Daphne processes (one per core by default: deploy/ adds web replicas for cores)
    serving portal.asgi on 127.0.0.1, with DEBUG off and a generated SECRET_KEY, each on a free
    port of its own, the bench's client sending each request to the next in turn as a Kubernetes
    Service spreads connections over the web pods (--web-listen socket: all on one listening socket);
  - --workers Celery worker processes (python -m celery -A portal worker, prefork, --concurrency
    each) and one Celery beat (python -m celery -A portal beat, schedule file in a temp dir);
  - the simulator cluster driver (LAB_DRIVER=labs.drivers.simulator.SimulatorDriver), whose
    instances come up --start-delay seconds after they are created (1 s by default). There is no
    NPU here: what is measured is the portal's own path, HTTP -> queued -> allocation pass ->
    admitted -> start task -> poll tasks -> running.

--driver kubernetes runs the same class on the Kubernetes driver instead: a fresh local control
plane (labs.devcluster: the real kube-apiserver, scheduler with its "volcano" profile,
controller-manager and etcd from `make controlplane`; a node simulator in this process plays
the kubelets, with --servers fake FlexNPU nodes whose pods come up --start-delay seconds after
they are bound), deploy/base applied, the course's namespace from `manage.py course_manifests`,
and the driver authenticated as the ServiceAccount deploy/ makes, giving each lab its pod,
Secret, Service and Ingress. After all run, every student presses Stop at once, and the run
waits until every session is stopped and the API server holds nothing of the class (pods,
secrets, services, ingresses); it fails if anything is left or an allocation is not released.

Data: --servers nodes of 8 x Ascend 910B with 64 GiB each, one course whose quota fits every
launch, K enrolled students, one "small" template (5 % AI Core, 4 GiB). One 8-card server takes
128 such instances, so launches beyond 128 x servers wait for room (and the run says so).

Before the clock starts every student is logged in: by default a Django session is written
straight into the database and its cookie used (cheap; --http-login logs in through the login
page instead, which costs a password hash per student). Then K POSTs to the student's Launch
endpoint (/sessions/launch/, the form the page submits, with CSRF token, Accept: application/json)
are queued at once on a pool of --threads threads, and the class's sessions are read through the
portal's LMS API (GET /api/v1/sessions/?course=..&page_size=500, page by page, with a token the
portal issued for the run, its rate limit lifted as JupyterHub has none) every --poll-period s
(0.1) until every student's session is running, or --timeout seconds have passed (then it says
how many are stuck and in which state). bench.jupyterhub reads the Hub's users the same way
(bench/poll.py): a session's running time is when the first poll showing it running returned.
A launch answered with a server error (5xx) or a broken connection is pressed again 1 s later,
as the student would (--no-retry: not); its times count from the first press, and "time to all
running" needs all K students running.

Printed: launches; time spent submitting; HTTP statuses; time from the first POST to the last
session seen running; p50/p99 of launch -> running per session (client send time to the poll that
saw it running); p50 of queued -> admitted (created_at -> admitted_at) and of admitted -> running
(the portal's own timestamps, read from the database after the run: where the time went); the
portal's CPU per session: the CPU milliseconds (utime + stime from /proc) of Daphne, of Celery
(workers and beat, with their children) and of the PostgreSQL backends of the run's database
(read every 0.05 s as well, so that a backend that ended during the run counts) from the first
launch to the last lab running, divided by K, each and in total, with the share of it that the
bench's own polling costs (10 polls measured after the run); the load average before and after,
and the median time of a small write + fsync in the run's temp dir just before the result.
Everything it started is stopped and every resource given back on exit, on Ctrl-C and on failure.
"""
