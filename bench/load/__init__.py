"""Load on the real portal with Locust: students, instructors and operators at once, against Daphne.

    .venv/bin/python -m bench.load                # 300 students, 20 instructors, 2 operators, 60 s
    .venv/bin/python -m bench.load --quick        # 30 users, 20 s
    make load LOAD_ARGS="--duration 90"

What runs, all on this machine and all real processes, each run with its own resources (the
helpers of bench.harness and bench.classstart):
  - a new PostgreSQL database (bench_load_<run>, migrated, dropped at the end, its login role
    limited to --db-connection-limit connections) and a Redis database number of its own;
  - --web-processes Daphne processes (one per core by default) serving portal.asgi on one listening
    socket on a free port, bound here and inherited (``daphne --fd``), DEBUG off; --workers Celery workers (prefork,
    --concurrency each) and beat; the simulator driver, whose labs start --start-delay seconds
    after they are created;
  - Locust (bench/locustfile.py) as a headless subprocess, with FastHttpUser clients and
    websocket-client sockets.

Data: --courses courses of one institution, the students spread over them, two instructors per
course (--instructors in all), --operators operators of the institution (also is_staff); every
course's quota fits all its students at once, on ceil(students / 128) nodes of 8 x 910B 64 GiB;
one "small" template (5 % AI Core, 4 GiB). Every account has its own username and the right
password (a login lockout counts failures per username).

Users, each logging in once through the login form (GET for the CSRF token, POST; at most
--login-concurrency at a time; reported apart: the password hash dominates it):
  - Student: keeps /ws/sessions/ open like the dashboard does (reconnecting like sessions.js);
    in a loop: GET / (dashboard), POST /sessions/launch/ (Accept: application/json, CSRF
    token), POST /sessions/<id>/stop/ a moment later, then wait for the socket to show the lab
    ended (the course allows one session at a time); --think seconds between steps. The
    students together aim at --rate launch + stop requests/s (default 100): each starts its
    loop every 2 x students / rate seconds (6 s for 300 at 100/s), at once when the last took
    longer, so a slow portal shows as a rate below the target. With --rate 0 they loop as fast
    as their think times let them.
    "launch -> socket" is the time from sending the launch to the first socket message carrying
    the new session (sent by the controller's run that admits it: the launch answer itself
    carries the queued session), "stop -> socket" from sending the stop to the first message
    showing it stopping or stopped (sent by the web process on commit). "launch -> running"
    (the simulator's start included) is shown for the labs that were running before their stop.
  - Instructor: keeps /ws/sessions/?course=<id> open like the course page; GET /courses/<id>/
    and GET /teach/, then GET /bench/floor/: a trivial view behind the same middleware (the
    run serves bench.load.settings: the portal's settings, that view, and bench.load.cpu).
  - Operator: GET /ops/ (the cluster page). Answered 404 throughout, it is reported as missing,
    not as failures.

Nobody works until every user has logged in with its socket open (or --login-timeout passed);
then they start within 8 s (or one paced loop), and after --warmup seconds the clock runs for
--duration seconds; only requests sent inside that window count. Then (--saturation seconds,
default 20; 0: none) the students drop their pacing and think 0.5-1 s, and after 8 s to settle the launch + stop
rate is measured again: the saturation rate, reported beside its p99s and CPU, not judged. Printed:
the logins and socket connections; per endpoint count, requests/s, p50, p99 and failures; the
socket delays and message count; the CPU each part used over the window (Daphne, Celery,
Locust, this run's PostgreSQL backends, the rest of the machine); the Daphne processes' CPU per
request of each endpoint and of the trivial view: each request's own thread CPU (the whole
middleware chain and the view run in one thread; bench.load.cpu sends time.thread_time() around
it in a response header) plus an even share of the rest of the Daphne processes' CPU over the
window (/proc; the ASGI server, websocket consumers and the publish after a commit, all on the
event loop); the load average and the reference loop; and PASS/FAIL against the targets: p99 <=
300 ms for every page load and for launch and stop, launch + stop >= 95 % of --rate (of 100
with --rate 0). The exit code is 0 on PASS, 1 on FAIL, 2 when the run broke.
"""
