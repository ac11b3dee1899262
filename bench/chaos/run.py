"""The run: the class start, each fault's bursts of launches and stops, the final checks and the report."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from urllib.parse import urlencode

from bench.chaos.faults import Faults
from bench.chaos.ledger import InvariantMonitor
from bench.chaos.plan import (
    DATABASE,
    DEV_CARD_CAP,
    IN_FLIGHT_MARGIN,
    INFERENCE_CARD_CAP,
    RETRY_AFTER,
    RETRY_FOR,
    TEMPLATES,
    FaultPlan,
    Landing,
    say,
    wait_until,
)
from bench.chaos.report import TARGETS, Check, Item, Press, fault_checks, fault_figures, fault_table, verdict
from bench.chaos.stack import Student
from bench.harness import http_request


@dataclass
class Burst:
    """One class burst: who presses Launch and which labs are stopped, then the futures of their presses."""

    launchers: list[Student]
    stoppers: list[tuple[Student, str]]
    # Judged wherever its labs run (pressed half-way through a node's outage: placement must avoid the node).
    anywhere: bool = False
    futures: list[Future] = field(default_factory=list)
    began: float = 0.0
    pressed: int = 0
    answered: int = 0  # presses the portal answered below 5xx: committed, or refused
    lock: threading.Lock = field(default_factory=threading.Lock)

    def press(self) -> None:
        with self.lock:
            self.pressed += 1

    def answer(self) -> None:
        with self.lock:
            self.answered += 1

    def items(self, timeout: float) -> list[Item]:
        deadline = time.monotonic() + timeout
        return [f.result(timeout=max(0.1, deadline - time.monotonic())) for f in self.futures]


class Chaos(Faults):
    """A class launching and stopping labs over HTTP while the faults hit the portal."""

    # -- students over HTTP ------------------------------------------------------------------------

    def _headers(self, student: Student) -> dict[str, str]:
        return {
            "Cookie": student.cookie,
            "X-CSRFToken": student.csrf,
            "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded",
        }

    def _press_until_answered(self, send: Callable[[], object], burst: Burst) -> tuple[list[Press], object]:
        """Press, and again ``RETRY_AFTER`` s after a 5xx or no answer, for up to ``RETRY_FOR`` s."""
        presses: list[Press] = []
        began = time.time()
        burst.press()
        while True:
            sent = time.time()
            response = send()
            presses.append(Press(sent, time.time(), response.status))
            if response.status and response.status < 500:
                burst.answer()
                return presses, response
            if time.time() - began > RETRY_FOR:
                return presses, response
            time.sleep(RETRY_AFTER)

    def launch(self, student: Student, burst: Burst) -> Item:
        body = urlencode({"course": self.course_id, "template": student.template_id})
        presses, last = self._press_until_answered(
            lambda: http_request(
                "POST", f"{self.base_url}/sessions/launch/", headers=self._headers(student), body=body, timeout=30
            ),
            burst,
        )
        item = Item("launch", student.index, presses)
        if last.status == 201:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                item.session_id = last.json()["session"]["id"]  # else found in the ledger, like a 5xx's
        elif 400 <= last.status < 500:
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                item.refused = str(last.json()["error"])
            item.refused = item.refused or f"HTTP {last.status}"
        return item

    def stop(self, student: Student, session_id: str, burst: Burst) -> Item:
        self.stop_requested.add(session_id)
        presses, last = self._press_until_answered(
            lambda: http_request(
                "POST", f"{self.base_url}/sessions/{session_id}/stop/", headers=self._headers(student), body="", timeout=30
            ),
            burst,
        )
        item = Item("stop", student.index, presses, session_id=session_id)
        if last.status == 409:
            item.refused = ""  # already ending: what the student wanted is under way
        elif 400 <= last.status < 500:
            item.refused = f"HTTP {last.status}"
        return item

    def who_is(self) -> tuple[list[Student], dict[int, str], dict[str, int]]:
        """Idle students (no open session), the running labs (student index -> session id), running labs per node."""
        by_user = {s.user_id: s for s in self.students}
        rows = self.ledger.rows(
            """SELECT s.student_id, s.id::text, s.state, COALESCE(n.name, '')
                 FROM labs_labsession s LEFT JOIN labs_allocation a ON a.session_id = s.id AND a.released_at IS NULL
                 LEFT JOIN labs_card c ON c.id = a.card_id LEFT JOIN labs_node n ON n.id = c.node_id
                WHERE s.state NOT IN ('stopped', 'failed')"""
        )
        busy = {user_id for user_id, *_ in rows}
        running = {by_user[user_id].index: sid for user_id, sid, state, _ in rows if state == "running"}
        per_node = collections.Counter(node for _, _, state, node in rows if state == "running")
        return [s for s in self.students if s.user_id not in busy], running, dict(sorted(per_node.items()))

    def plan_bursts(self, plan: FaultPlan) -> tuple[list[Burst], set[str]]:
        """The fault's bursts (the one it lands on, and the one pressed half-way through it) and the
        labs it fails on purpose, chosen now: during the fault the ledger may be out of reach."""
        idle, running, per_node = self.who_is()
        say(f"  running before it: {per_node}; {len(idle)} students idle")
        self.rng.shuffle(idle)
        candidates = sorted((i, sid) for i, sid in running.items() if sid not in self.injected)
        self.rng.shuffle(candidates)
        doomed = {sid for _, sid in candidates[:3]} if plan.name == "inject" else set()
        candidates = [(i, sid) for i, sid in candidates if sid not in doomed]
        shapes = [(plan.launches, plan.stops, False)] + ([(*plan.mid, True)] if plan.mid else [])
        bursts = []
        for launches, stops, anywhere in shapes:
            stops = len(candidates) if stops < 0 else stops
            launchers, idle = idle[:launches], idle[launches:]
            stopped, candidates = candidates[:stops], candidates[stops:]
            if len(launchers) < launches or len(stopped) < stops:
                say(f"  only {len(launchers)} idle students and {len(stopped)} labs to stop (wanted {launches} and {stops})")
            bursts.append(Burst(launchers, [(self.students[i], sid) for i, sid in stopped], anywhere=anywhere))
        return bursts, doomed

    def fire(self, burst: Burst) -> None:
        """Every press of the burst at once, each student on a thread of the pool."""
        work = [(self.launch, (s, burst)) for s in burst.launchers]
        work += [(self.stop, (student, sid, burst)) for student, sid in burst.stoppers]
        self.rng.shuffle(work)
        burst.began = time.time()
        burst.futures = [self.pool.submit(fn, *fn_args) for fn, fn_args in work]

    def live_in_flight(self, burst: Burst) -> int:
        """Pressed and not yet running (a launch) or ended (a stop), as the ledger says now."""
        settled = self.ledger.rows(
            """SELECT count(*) FROM labs_labsession
                WHERE (student_id = ANY(%s) AND created_at >= to_timestamp(%s)
                       AND (running_at IS NOT NULL OR ended_at IS NOT NULL))
                   OR (id::text = ANY(%s) AND ended_at IS NOT NULL)""",
            [[s.user_id for s in burst.launchers], burst.began - 0.5, [sid for _, sid in burst.stoppers]],
        )[0][0]
        return burst.pressed - settled

    def wait_to_land(self, burst: Burst, lead: float) -> int:
        """Wait for the moment ``Landing`` picks (at most 3 s after the burst's first press);
        answer how many sessions were in flight then."""
        landing = Landing(self.args.min_in_flight + IN_FLIGHT_MARGIN, burst.began + lead, burst.began + 3.0)
        while True:
            live = self.live_in_flight(burst)
            out, half_answered = burst.pressed >= len(burst.futures), 2 * burst.answered >= len(burst.futures)
            if landing.lands(now=time.time(), live=live, out=out, half_answered=half_answered):
                return live
            time.sleep(0.02)

    def resolve(self, items: list[Item], *, driver_fault: bool = False) -> None:
        """Fill in what the ledger says became of each launch and stop."""
        launches = [item for item in items if item.kind == "launch"]
        by_user = {s.index: s.user_id for s in self.students}
        rows = self.ledger.rows(
            """SELECT s.id::text, s.student_id, extract(epoch FROM s.created_at), extract(epoch FROM s.stopping_at),
                      extract(epoch FROM s.running_at), extract(epoch FROM s.ended_at), s.state, s.reason_code,
                      s.create_attempts, COALESCE(n.name, '')
                 FROM labs_labsession s LEFT JOIN labs_allocation a ON a.session_id = s.id
                 LEFT JOIN labs_card c ON c.id = a.card_id LEFT JOIN labs_node n ON n.id = c.node_id
                WHERE s.student_id = ANY(%s) OR s.id::text = ANY(%s)""",
            [[by_user[i.student] for i in launches], [i.session_id for i in items if i.kind == "stop"]],
        )
        from django.conf import settings

        attempts = settings.LAB_CREATE_ATTEMPTS
        by_id = {row[0]: row for row in rows}
        by_student = collections.defaultdict(list)
        for row in rows:
            by_student[row[1]].append(row)
        for item in items:
            row = None
            if item.kind == "launch":
                if item.session_id is None:
                    # Answered 5xx or refused: the student's session created after the first press, if any.
                    later = [r for r in by_student[by_user[item.student]] if float(r[2]) >= item.first_sent - 0.5]
                    row = min(later, key=lambda r: r[2]) if later else None
                    if row is not None:
                        item.session_id, item.refused = row[0], ""
                else:
                    row = by_id.get(item.session_id)
            else:
                row = by_id.get(item.session_id)
            if row is None:
                continue
            _, _, created, stopping, running, ended, state, reason, create_attempts, node = row
            item.node = node or item.node
            item.ended = ended is not None
            if item.kind == "launch":
                item.committed_at = float(created)
                item.running = running is not None
                item.done_at = float(running) if running is not None else (float(ended) if ended is not None else None)
                exhausted = reason == "session.create_failed" and create_attempts >= attempts - 1
                item.expected_failure = driver_fault and state == "failed" and exhausted
            else:
                item.committed_at = float(stopping) if stopping is not None else (float(ended) if ended is not None else None)
                item.done_at = float(ended) if ended is not None else None

    # -- the faults ------------------------------------------------------------------------------------

    def run_fault(self, plan: FaultPlan) -> None:
        """Land ``plan``'s fault on a class burst, hold it (pressing the mid-fault burst half-way),
        clear it, wait for its sessions to settle, and judge it."""
        args = self.args
        say(f"FAULT {plan.name}: {plan.summary}")
        bursts, self.doomed = self.plan_bursts(plan)
        self.fire(bursts[0])
        live = self.wait_to_land(bursts[0], self.args.lead if plan.lead is None else plan.lead)
        injected, answered = time.time(), bursts[0].answered
        hold, clear = getattr(self, f"fault_{plan.name.replace('-', '_')}")()
        marked = ""
        if len(bursts) > 1 and plan.name.startswith("agent"):
            # Once the portal knows the node is out (or 70 % into the outage): placement must go elsewhere.
            known = wait_until(lambda: not self.node_available("n1"), 0.7 * hold, interval=0.1)
            marked = f"n1 marked unavailable {time.time() - injected:.1f} s in" if known else "n1 NOT marked unavailable"
            self.fire(bursts[1])
        elif len(bursts) > 1:
            time.sleep(hold / 2)
            self.fire(bursts[1])
        time.sleep(max(0.0, injected + hold - time.time()))
        outcome = clear()
        cleared = time.time()
        say(
            f"  landed {injected - bursts[0].began:.2f} s after the first press with {live} in flight "
            f"({answered} of {len(bursts[0].futures)} answered); "
            f"cleared {cleared - injected:.1f} s later: {outcome}"
        )
        items: list[Item] = []
        anywhere: set[int] = set()
        for burst in bursts:
            for item in burst.items(timeout=RETRY_FOR + 60):
                items.append(item)
                if burst.anywhere:
                    anywhere.add(id(item))
        deadline = cleared + args.settle_bound
        while True:
            self.resolve(items, driver_fault=plan.name == "driver")
            if all(item.settled_at() is not None for item in items) or time.time() > deadline:
                break
            time.sleep(0.25)
        settled = time.time()
        leaked, leak_notes = self.leaks(after_outage=plan.name.startswith("agent"))
        lost, lost_notes = self.lost(since=injected)
        stuck_elsewhere = self.stuck_elsewhere(before=bursts[0].began, items=items)
        faulted = "n1" if plan.name.startswith("agent") else ""

        def measured(item: Item) -> bool:
            return not faulted or item.node != faulted or id(item) in anywhere

        if plan.name == "inject":
            self.check_injected()
        notes = leak_notes + lost_notes
        for item in items:
            if item.refused:
                notes.append(f"{item.kind} of student {item.student} refused: {item.refused}")
            elif item.settled_at() is None:
                notes.append(f"{item.kind} of student {item.student} never settled (session {item.session_id})")
        if faulted:
            where = collections.Counter(
                item.node or "nowhere" for item in items if id(item) in anywhere and item.kind == "launch"
            )
            notes.append(f"{marked}; the launches pressed then went to {dict(where)}")
            elsewhere = marked.startswith("n1 marked") and set(where) <= {"n2"}
            self.checks.append(
                Check(f"{plan.name}: launches once n1 was out placed on n2", elsewhere, f"{marked}: {dict(where)}")
            )
        figures = fault_figures(
            plan.name,
            plan.summary,
            items,
            injected=injected,
            cleared=cleared,
            measured=measured,
            lost=lost,
            leaked=leaked,
            stuck_elsewhere=stuck_elsewhere,
            violations=len(self.monitor.between(bursts[0].began, settled)),
            notes=notes,
        )
        checks = fault_checks(figures, TARGETS[plan.name], min_in_flight=args.min_in_flight)
        self.rows.append((figures, TARGETS[plan.name], checks))
        missed = [c for c in checks if not c.passed]
        say(
            f"  {figures.in_flight} in flight when it landed; {figures.server_errors} 5xx, "
            f"{figures.committed_behind_500} behind a 500; start p99 {_s(figures.start_p99)}, stop p99 {_s(figures.stop_p99)}, "
            f"settle {_s(figures.settle)} ({figures.caught_at_clear} in flight at the clear); "
            + ("all targets met" if not missed else "MISSED: " + "; ".join(f"{c.what} ({c.detail})" for c in missed))
        )
        time.sleep(1.0)

    # -- the class start and the whole run --------------------------------------------------------------

    def class_start(self) -> None:
        """Fill the first node template by template, so each card reaches its template's cap."""
        by_template = collections.defaultdict(list)
        for student in self.students:
            by_template[student.template].append(student)
        everyone_running = True
        for plan in TEMPLATES:
            began = time.time()
            burst = Burst(by_template[plan.slug][: plan.first_fill], [])
            self.fire(burst)
            items = burst.items(timeout=120)
            ok = wait_until(lambda items=items: (self.resolve(items), all(i.running for i in items))[1], 60, interval=0.25)
            everyone_running &= ok
            say(
                f"class start: {plan.first_fill} x {plan.slug} running after {time.time() - began:.1f} s"
                if ok
                else f"class start: NOT all {plan.first_fill} x {plan.slug} running"
            )
        self.checks.append(
            Check(
                "class start: every lab of the class start running",
                everyone_running,
                f"{sum(p.first_fill for p in TEMPLATES)} launched",
            )
        )

    def supervise(self, done: threading.Event) -> None:
        """Restart a web process, worker or beat that exited by itself, as systemd would; each is a failed check."""
        while not done.wait(0.5):
            for proc in [*self.webs, *self.workers, self.beat]:
                with proc.lock:
                    if proc.expected_down or proc.alive():
                        continue
                    code = proc.process.returncode
                    last = [line for line in proc.log_since_start().splitlines() if "CRITICAL" in line or "Error" in line]
                    why = last[-1].strip()[:200] if last else "nothing in its log"
                    self.crashes.append(f"{proc.name} exited by itself (code {code}): {why}")
                    say(f"SUPERVISOR: {proc.name} exited by itself (code {code}): {why}; restarting it")
                    proc.start()

    def run(self) -> int:
        self.setup()
        self.monitor = InvariantMonitor(self.postgres.url(DATABASE))
        self.monitor.start()
        done = threading.Event()
        threading.Thread(target=self.supervise, args=(done,), name="supervisor", daemon=True).start()
        started = time.monotonic()
        try:
            self.class_start()
            for plan in self.args.faults:
                self.run_fault(plan)
            self.final()
        finally:
            done.set()
            self.monitor.stop()
        say(f"faults took {time.monotonic() - started:.0f} s")
        return self.report()

    def final(self) -> None:
        m = self.monitor
        caps = {
            "AI Core 100 %": m.max_core >= 100,
            "memory 64 GiB": m.max_memory_share >= 1.0,
            "16 development instances": m.max_dev_instances >= DEV_CARD_CAP,
            "8 inference instances": m.max_inference_instances >= INFERENCE_CARD_CAP,
        }
        self.checks.append(
            Check(
                "every per-card cap reached (so its check could fail)",
                all(caps.values()),
                f"most seen on a card: {m.max_core} % AI Core, {m.max_memory_share:.0%} of its memory, "
                f"{m.max_dev_instances} development instances, {m.max_inference_instances} with inference",
            )
        )
        self.checks.append(
            Check(
                "ledger invariants checked all along",
                not m.violations and m.samples >= 10,
                f"{m.samples} checks every 0.5 s ({m.unavailable} while the database was away), {len(m.violations)} violations"
                + "".join(f"; {v.kind}: {v.detail}" for v in m.violations[:5]),
            )
        )
        self.checks.append(Check("no process died by itself", not self.crashes, "; ".join(self.crashes) or "none"))

    def report(self) -> int:
        print(flush=True)
        print("faults (latencies in seconds, value/target; ! a missed target; - nothing to measure):")
        for line in fault_table(self.rows):
            print(f"  {line}")
        print("per fault, targets missed and what was seen:")
        for figures, _, checks in self.rows:
            for check in checks:
                if not check.passed:
                    print(f"  FAIL  {figures.name}: {check.what}: {check.detail}")
            for note in figures.notes:
                print(f"        {figures.name}: {note}")
        print("the whole run:")
        for check in self.checks:
            print(f"  {'PASS' if check.passed else 'FAIL'}  {check.what}: {check.detail}")
        everything = [c for _, _, checks in self.rows for c in checks] + self.checks
        ok = verdict(everything)
        print(f"chaos: {'PASS' if ok else 'FAIL'} ({sum(not c.passed for c in everything)} of {len(everything)} checks failed)")
        return 0 if ok else 1


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"
