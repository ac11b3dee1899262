"""The users of ``bench.load``: students, instructors and operators of the portal (run by Locust, not by hand).

Locust runs this file with ``LOAD_CONFIG`` naming the JSON that ``bench.load`` wrote: the
accounts, the window length, think times and where to write the results. Every user logs in
once through the login form, with an account of its own, and opens its page's socket. Once all
have (or the login timeout passes) they start work, the window opens after the warm-up, and
when it closes the results are written and Locust is told to quit. See ``bench/load/`` for
what each user does and what is reported.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.parse import urlsplit

import gevent
import orjson
import websocket
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from locust import FastHttpUser, between, constant_pacing, events, task

from bench.load.plan import (
    COURSE_PAGE,
    CPU_HEADER,
    DASHBOARD,
    FLOOR,
    LAUNCH,
    LOGIN_FORM,
    LOGIN_POST,
    MARK_PREFIX,
    OPS,
    PROGRESS_PREFIX,
    SATURATION_RAMP,
    STOP,
    TEACH,
    WS_CONNECT,
    WS_LAUNCH,
    WS_RUNNING,
    WS_STOP,
    csrf_token_of,
    launch_forms_of,
)

CONFIG = json.loads(Path(os.environ["LOAD_CONFIG"]).read_text())
THINK = tuple(CONFIG["think"])
ENDED_TIMEOUT = 30.0  # seconds a student waits for the socket to show its stopped lab ended
SOCKET_TIMEOUT = 10.0  # for the message that follows a launch or stop at once
SOCKET_GIVE_UP = 120.0  # seconds a user keeps trying to open its socket before it gives up
LOGIN_ATTEMPTS = 3
LOGIN_RETRY_SECONDS = 2.0
LOGIN_SLOTS = BoundedSemaphore(CONFIG["login_concurrency"])
PACE = CONFIG["pace"]  # seconds from the start of a student's loop to the next one's; None: no pacing
# Seconds over which the users start work: about one student's loop, so the rate is even from the start.
START_SPREAD = max(8.0, PACE or 0.0)
ALL_STATES = ("queued", "admitted", "starting", "running", "stopping", "stopped", "failed")

random.seed(CONFIG["seed"])
# Each user takes the next account of its kind: no two share a username.
_students = iter(CONFIG["students"])
_instructors = iter(CONFIG["instructors"])
_operators = iter(CONFIG["operators"])


class Run:
    """The run's state, shared by every user (one process, greenlets)."""

    started = time.time()
    logged_in = 0
    login_failed = 0
    ready = 0  # logged in, socket open where the page has one
    given_up = 0  # login failed, or the socket never opened
    stopped_before_running = 0
    login_seconds: float | None = None
    window: tuple[float, float] | None = None
    saturation_window: tuple[float, float] | None = None
    unpaced = PACE is None  # the students' pacing is dropped for the saturation phase
    think = THINK
    ready_at_start = 0
    go = Event()  # set when the users may start work
    samples: list[list] = []
    ws_messages = 0
    ws_missed: Counter = Counter()
    errors: Counter = Counter()
    written = False


def progress(text: str) -> None:
    print(f"{PROGRESS_PREFIX}{text}", flush=True)


def in_window(moment: float) -> bool:
    return Run.window is not None and Run.window[0] <= moment < Run.window[1]


@events.request.add_listener
def record(request_type, name, response_time, response=None, exception=None, start_time=None, **kwargs):
    status = getattr(response, "status_code", 0) or 0
    sent = start_time if start_time is not None else time.time() - response_time / 1000
    headers = getattr(response, "headers", None) or {}
    cpu_us = headers.get(CPU_HEADER)
    Run.samples.append([request_type, name, sent, response_time, exception is None, int(status), cpu_us and int(cpu_us)])


def socket_delay(name: str, sent: float, arrived: float | None) -> None:
    """A socket delay as a Locust request of type WS (so Locust's own summary shows it too)."""
    if arrived is None:
        if in_window(sent):
            Run.ws_missed[name] += 1
        events.request.fire(
            request_type="WS", name=name, response_time=0.0, response_length=0, exception=TimeoutError(name), start_time=sent
        )
    else:
        events.request.fire(
            request_type="WS",
            name=name,
            response_time=(arrived - sent) * 1000,
            response_length=0,
            exception=None,
            start_time=sent,
        )


@events.user_error.add_listener
def on_user_error(user_instance, exception, tb, **kwargs):
    Run.errors[type(exception).__name__] += 1


@events.test_start.add_listener
def on_test_start(environment, **kwargs):
    gevent.spawn(coordinate, environment)


def coordinate(environment) -> None:
    """Let the users start work once every one is ready (or has given up, or the login timeout
    passed), open the window ``warmup`` seconds later, close it ``duration`` seconds after that,
    write the results and quit.

    Nobody works while others log in: the logins (a password hash each) are not slowed by the
    work, and the work is measured without logins beside it."""
    total = len(CONFIG["students"]) + len(CONFIG["instructors"]) + len(CONFIG["operators"])
    deadline = Run.started + CONFIG["login_timeout"]
    shown = 0
    while Run.ready + Run.given_up < total and time.time() < deadline:
        if Run.ready >= shown + 50:
            shown = Run.ready - Run.ready % 50
            progress(f"{Run.ready} of {total} users logged in and ready after {time.time() - Run.started:.0f} s")
        gevent.sleep(0.2)
    Run.login_seconds = time.time() - Run.started
    Run.ready_at_start = Run.ready
    note = "" if Run.ready == total else f" (only {Run.ready} of {total}: {Run.given_up} gave up, the rest still trying)"
    progress(
        f"{Run.ready} users ready after {Run.login_seconds:.0f} s{note}; they start within {START_SPREAD:g} s, "
        f"then {CONFIG['warmup']:g} s of warm-up and {CONFIG['duration']:g} s measured"
    )
    Run.go.set()
    gevent.sleep(CONFIG["warmup"])
    start = time.time()
    Run.window = (start, start + CONFIG["duration"])
    print(f"{MARK_PREFIX}window-open", flush=True)
    gevent.sleep(CONFIG["duration"])
    print(f"{MARK_PREFIX}window-closed", flush=True)
    if CONFIG["saturation"]:
        Run.unpaced = True
        Run.think = tuple(CONFIG["saturation_think"])
        progress(
            f"window closed; no pacing from now, think {Run.think[0]:g}-{Run.think[1]:g} s: {SATURATION_RAMP:g} s to "
            f"settle, then {CONFIG['saturation']:g} s measured for the saturation rate"
        )
        gevent.sleep(SATURATION_RAMP)
        start = time.time()
        Run.saturation_window = (start, start + CONFIG["saturation"])
        print(f"{MARK_PREFIX}saturation-open", flush=True)
        gevent.sleep(CONFIG["saturation"])
        print(f"{MARK_PREFIX}saturation-closed", flush=True)
    write_results()
    environment.runner.quit()


@events.quitting.add_listener
def on_quitting(environment, **kwargs):
    write_results()


def write_results() -> None:
    if Run.written:
        return
    Run.written = True
    data = {
        "window": Run.window,
        "saturation_window": Run.saturation_window,
        "samples": Run.samples,
        "users": {
            "Student": len(CONFIG["students"]),
            "Instructor": len(CONFIG["instructors"]),
            "Operator": len(CONFIG["operators"]),
        },
        "logged_in": Run.logged_in,
        "login_failed": Run.login_failed,
        "login_seconds": Run.login_seconds,
        "ready": Run.ready_at_start,
        "ws_messages": Run.ws_messages,
        "ws_missed": dict(Run.ws_missed),
        "stopped_before_running": Run.stopped_before_running,
        "errors": dict(Run.errors),
    }
    with open(CONFIG["results"], "w") as handle:
        json.dump(data, handle)


def cookie(jar: CookieJar, name: str) -> str:
    return next((c.value for c in jar if c.name == name), "")


class SessionSocket:
    """``/ws/sessions/`` as the page keeps it (reconnecting after 0.5 s, doubling up to 15 s, like
    ``sessions.js``); remembers when each (session, state) was first seen. Every connection
    attempt is a "connect" sample: Daphne drops a handshake the portal has not accepted within 5 s."""

    def __init__(self, base_url: str, session_cookie: str, query: str = "") -> None:
        self.url = f"ws://{urlsplit(base_url).netloc}/ws/sessions/{query}"
        self.header = [f"Cookie: sessionid={session_cookie}"]
        self.seen: dict[tuple[str, str], float] = {}
        self.changed = Event()
        self.ws: websocket.WebSocket | None = None
        self.reader: gevent.Greenlet | None = None

    def open(self, *, give_up_after: float) -> bool:
        """Connect (retrying like the page) and start reading; ``False`` if still not connected after ``give_up_after`` s."""
        if not self._connect(time.monotonic() + give_up_after):
            return False
        self.reader = gevent.spawn(self._read)
        return True

    def _connect(self, deadline: float) -> bool:
        delay = 0.5
        while True:
            sent = time.time()
            started = time.perf_counter()
            try:
                # A browser checks a message's UTF-8 in native code; websocket-client's check is pure
                # Python and was a third of Locust's CPU, on the machine it measures the portal on. The
                # text is still decoded strictly: bytes that are not UTF-8 raise (a ValueError) below.
                self.ws = websocket.create_connection(self.url, header=self.header, timeout=30, skip_utf8_validation=True)
                error = None
            except (websocket.WebSocketException, OSError) as exc:
                error = exc
            events.request.fire(
                request_type="WS", name=WS_CONNECT, response_time=(time.perf_counter() - started) * 1000,
                response_length=0, exception=error, start_time=sent,
            )  # fmt: skip
            if error is None:
                self.ws.settimeout(None)
                return True
            if time.monotonic() + delay > deadline:
                return False
            gevent.sleep(delay)
            delay = min(delay * 2, 15.0)

    def _read(self) -> None:
        while True:
            try:
                message = orjson.loads(self.ws.recv())
            except (websocket.WebSocketException, OSError, ValueError):
                Run.errors["socket closed by the portal"] += 1
                if not self._connect(time.monotonic() + 60):
                    return
                continue
            arrived = time.time()
            if in_window(arrived):
                Run.ws_messages += 1
            for session in message.get("sessions", []):
                self.seen.setdefault((session["id"], session["state"]), arrived)
            self.changed.set()

    def wait_for(self, session_id: str, states: tuple[str, ...], timeout: float) -> float | None:
        """When a message first showed the session in one of ``states``; ``None`` if none came within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            times = [self.seen[(session_id, s)] for s in states if (session_id, s) in self.seen]
            if times:
                return min(times)
            left = deadline - time.monotonic()
            if left <= 0 or self.reader is None or self.reader.dead:
                return None
            self.changed.clear()
            self.changed.wait(min(left, 1.0))

    def close(self) -> None:
        if self.reader is not None:
            self.reader.kill(block=False)
        if self.ws is not None:
            try:
                self.ws.close()
            except (websocket.WebSocketException, OSError):
                pass


class PortalUser(FastHttpUser):
    """A person with an account of their own: logs in once, then does ``work`` in a loop.

    A user whose login or socket never succeeds stays idle instead of stopping: Locust would
    start another user in its place during the ramp, and there is no account left for it.
    """

    abstract = True
    socket: SessionSocket | None = None
    ready = False
    working = False

    def on_start(self) -> None:
        self.ready = self.log_in(self.account()) and self.open_socket()
        if self.ready:
            Run.ready += 1
        else:
            Run.given_up += 1

    def account(self) -> str:
        raise NotImplementedError

    def open_socket(self) -> bool:
        return True

    @task
    def loop(self) -> None:
        if not self.ready:
            gevent.sleep(3600)
            return
        if not self.working:
            Run.go.wait()
            gevent.sleep(random.uniform(0, START_SPREAD))  # not all at once
            self.working = True
        self.work()

    def work(self) -> None:
        raise NotImplementedError

    def log_in(self, username: str) -> bool:
        """The login form, pressed again after a server error or a broken connection, as a person would."""
        self.username = username
        for attempt in range(LOGIN_ATTEMPTS):
            if attempt:
                gevent.sleep(LOGIN_RETRY_SECONDS)
            # Logins hash a password each (slow by design): at most ``login_concurrency`` at once,
            # so the ramp does not turn into a queue of them in front of everything else.
            with LOGIN_SLOTS:
                status = self._log_in_once()
            if status == 302:
                Run.logged_in += 1
                return True
            if 0 < status < 500:
                break  # a refusal (wrong password, lockout): pressing again changes nothing
        Run.login_failed += 1
        return False

    def _log_in_once(self) -> int:
        with self.client.get("/accounts/login/", name=LOGIN_FORM, catch_response=True) as page:
            if page.status_code != 200:
                page.failure(f"HTTP {page.status_code}")
                return page.status_code or 0
            token = csrf_token_of(page.text)
        form = {"username": self.username, "password": CONFIG["password"], "csrfmiddlewaretoken": token}
        with self.client.post("/accounts/login/", data=form, name=LOGIN_POST, allow_redirects=False, catch_response=True) as done:
            if done.status_code != 302 or not cookie(self.client.cookiejar, "sessionid"):
                done.failure(f"HTTP {done.status_code}, no session")
                return done.status_code if done.status_code != 302 else 0
            done.success()
            return 302

    def connect_socket(self, query: str = "") -> bool:
        """The page's socket, connected before the user goes on (the page shows "live" first)."""
        self.socket = SessionSocket(self.host, cookie(self.client.cookiejar, "sessionid"), query)
        return self.socket.open(give_up_after=SOCKET_GIVE_UP)

    def on_stop(self) -> None:
        if self.socket is not None:
            self.socket.close()


class Student(PortalUser):
    """The dashboard with its socket: launch, use the lab a moment, stop, wait until it has ended; again."""

    fixed_count = len(CONFIG["students"])
    paced = constant_pacing(PACE or 1.0)

    def wait_time(self) -> float:
        """With a pace, what is left of the loop (none when it took longer); without (--rate 0, or the
        saturation phase), a think time."""
        return random.uniform(*Run.think) if Run.unpaced else self.paced()

    def account(self) -> str:
        return next(_students)

    def open_socket(self) -> bool:
        return self.connect_socket()

    def work(self) -> None:
        with self.client.get("/", name=DASHBOARD, catch_response=True) as page:
            if page.status_code != 200:
                page.failure(f"HTTP {page.status_code}")
                return
            token = csrf_token_of(page.text)
            course, template = launch_forms_of(page.text)[0]
        gevent.sleep(random.uniform(*Run.think))
        headers = {"X-CSRFToken": token, "Accept": "application/json"}
        launched = time.time()
        with self.client.post(
            "/sessions/launch/", data={"course": course, "template": template}, headers=headers, name=LAUNCH, catch_response=True
        ) as answer:
            if answer.status_code != 201:
                answer.failure(f"HTTP {answer.status_code}: {answer.text[:200]}")
                return
            session_id = answer.json()["session"]["id"]
        socket_delay(WS_LAUNCH, launched, self.socket.wait_for(session_id, ALL_STATES, SOCKET_TIMEOUT))
        gevent.sleep(random.uniform(*Run.think))  # running by now, or still on its way: the student stops it either way
        stopped = time.time()
        with self.client.post(f"/sessions/{session_id}/stop/", headers=headers, name=STOP, catch_response=True) as answer:
            if answer.status_code != 200:
                answer.failure(f"HTTP {answer.status_code}: {answer.text[:200]}")
        socket_delay(WS_STOP, stopped, self.socket.wait_for(session_id, ("stopping", "stopped", "failed"), SOCKET_TIMEOUT))
        # The course allows one session at a time: the next launch waits until this one has ended.
        if self.socket.wait_for(session_id, ("stopped", "failed"), ENDED_TIMEOUT) is None and in_window(stopped):
            Run.ws_missed["stopped"] += 1
        running = self.socket.seen.get((session_id, "running"))
        if running is not None:
            socket_delay(WS_RUNNING, launched, running)
        elif in_window(launched):
            Run.stopped_before_running += 1


class Instructor(PortalUser):
    """The course page (with its socket for the course) and the console's home, in turn; then the trivial
    view (``/bench/floor/``, the same middleware) that ``bench.load`` sets the endpoints' CPU beside."""

    fixed_count = len(CONFIG["instructors"])
    wait_time = between(2, 5)

    def account(self) -> str:
        username, self.course_id = next(_instructors)
        return username

    def open_socket(self) -> bool:
        return self.connect_socket(f"?course={self.course_id}")

    def work(self) -> None:
        with self.client.get(f"/courses/{self.course_id}/", name=COURSE_PAGE, catch_response=True) as page:
            if page.status_code != 200:
                page.failure(f"HTTP {page.status_code}")
        gevent.sleep(random.uniform(2, 5))
        with self.client.get("/teach/", name=TEACH, catch_response=True) as page:
            if page.status_code != 200:
                page.failure(f"HTTP {page.status_code}")
        with self.client.get("/bench/floor/", name=FLOOR, catch_response=True) as page:
            if page.status_code != 200:
                page.failure(f"HTTP {page.status_code}")


class Operator(PortalUser):
    """The cluster page; a 404 (not built yet) is recorded as such, not as a failure."""

    fixed_count = len(CONFIG["operators"])
    wait_time = between(3, 6)

    def account(self) -> str:
        return next(_operators)

    def work(self) -> None:
        with self.client.get("/ops/", name=OPS, catch_response=True) as page:
            if page.status_code == 404:
                page.success()  # bench.load reports an endpoint that only answers 404 as missing
            elif page.status_code != 200:
                page.failure(f"HTTP {page.status_code}")
