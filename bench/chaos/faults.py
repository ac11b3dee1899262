"""The faults ``make chaos`` fires, and what it looks for after each: leaks, lost labs, stuck sessions."""

from __future__ import annotations

import collections
import contextlib
import signal
import threading
import time
from collections.abc import Callable

from bench.chaos.ledger import Ledger
from bench.chaos.plan import DATABASE, HOLDS, IN_PROGRESS, INJECTED_MESSAGE, wait_until
from bench.chaos.processes import agent_up, redis_up
from bench.chaos.report import Check, Item
from bench.chaos.stack import Stack


class Faults(Stack):
    """Each fault (``fault_<name>``: its lead time and the step that fires it) and the checks after it."""

    def check_injected(self) -> None:
        """The labs failed on purpose must end as failed: else the harness could not see a failure."""
        rows = self.ledger.rows("SELECT id::text, state FROM labs_labsession WHERE id::text = ANY(%s)", [sorted(self.doomed)])
        failed = sum(1 for _, state in rows if state == "failed")
        self.checks.append(
            Check("injected failures noticed", failed == len(self.doomed) > 0, f"{failed} of {len(self.doomed)} ended failed")
        )

    # Each fault: inject it now; return how long it holds and what clears it (returning what happened).

    def fault_control(self) -> tuple[float, Callable[[], str]]:
        return 0.0, lambda: "nothing to clear"

    def fault_driver(self) -> tuple[float, Callable[[], str]]:
        driver = self.simulator()
        driver.inject_api_faults(create_failure_rate=0.3, delete_failure_rate=0.3, create_delay_seconds=0.5)

        def clear() -> str:
            driver.clear_api_faults()
            return "the cluster API answers every call again"

        return 8.0, clear

    def fault_worker(self) -> tuple[float, Callable[[], str]]:
        worker = self.workers[0]
        worker.kill9()

        def clear() -> str:
            worker.start()
            return f"{worker.name} restarted, " + ("ready" if worker.wait_for_log(" ready.", 60) else "NOT ready")

        return self.args.down, clear

    def fault_beat(self) -> tuple[float, Callable[[], str]]:
        self.beat.kill9()

        def clear() -> str:
            self.beat.start()
            return "beat restarted, " + ("started" if self.beat.wait_for_log("beat: Starting", 30) else "NOT started")

        return self.args.down, clear

    def fault_redis(self) -> tuple[float, Callable[[], str]]:
        self.redis.kill9()

        def clear() -> str:
            self.redis.start()
            return "Redis answers again (empty)" if wait_until(lambda: redis_up(self.redis_port), 15) else "Redis NOT back"

        return self.args.down, clear

    def fault_postgres(self) -> tuple[float, Callable[[], str]]:
        self.postgres.stop("fast")

        def clear() -> str:
            self.postgres.start()
            return "PostgreSQL accepts connections again"

        return self.args.down, clear

    def fault_backends(self) -> tuple[float, Callable[[], str]]:
        admin = Ledger(self.postgres.url("postgres"), "chaos-harness")
        stopping = threading.Event()
        terminated = [0]

        def terminate() -> None:
            while not stopping.is_set():
                with contextlib.suppress(Exception):
                    terminated[0] += admin.rows(
                        """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                            WHERE datname = %s AND pid <> pg_backend_pid() AND application_name NOT LIKE 'chaos-%%'""",
                        [DATABASE],
                        attempts=1,
                    )[0][0]
                stopping.wait(0.2)

        thread = threading.Thread(target=terminate, name="terminate", daemon=True)
        thread.start()

        def clear() -> str:
            stopping.set()
            thread.join()
            admin.close()
            return f"{terminated[0]} backends terminated"

        return 3.0, clear

    def fault_inject(self) -> tuple[float, Callable[[], str]]:
        from labs.drivers import DriverError

        driver = self.simulator()
        for session_id in sorted(self.doomed):
            with contextlib.suppress(DriverError):
                driver.inject_failure(session_id, INJECTED_MESSAGE)
        self.injected |= self.doomed
        return 0.0, lambda: f"{len(self.doomed)} instances report FAILED"

    def fault_agent_pause(self) -> tuple[float, Callable[[], str]]:
        agent = self.agents["n1"]
        agent.signal_group(signal.SIGSTOP)

        def clear() -> str:
            agent.signal_group(signal.SIGCONT)
            return "agent continued, " + (
                "answering" if wait_until(lambda: agent_up(self.agent_urls["n1"]), 20) else "NOT answering"
            )

        return self.args.agent_down, clear

    def fault_agent_kill(self) -> tuple[float, Callable[[], str]]:
        agent = self.agents["n1"]
        agent.kill9()

        def clear() -> str:
            agent.start()
            ok = wait_until(lambda: agent_up(self.agent_urls["n1"]), 20)
            return "agent started again (no registrations), " + ("answering" if ok else "NOT answering")

        return self.args.agent_down, clear

    def fault_storm(self) -> tuple[float, Callable[[], str]]:
        return 0.0, lambda: "the stops are pressed"

    # -- leaks, losses, stuck sessions ---------------------------------------------------------------

    def leaks(self, *, after_outage: bool) -> tuple[int, list[str]]:
        """Instances and registrations without a live session, allocations held by ended sessions;
        only what is there in two looks 1.5 s apart (an instance being made is not a leak), or a
        reconciler period and 2 s apart after a node's outage (its agent is told on the next sync)."""
        first = self._leak_look()
        time.sleep(self.args.reconcile_seconds + 2 if after_outage else 1.5)
        second = self._leak_look()
        persistent = {kind: first[kind] & second[kind] for kind in first}
        notes = [f"leaked {kind}: {sorted(found)[:3]}" for kind, found in persistent.items() if found]
        return sum(len(found) for found in persistent.values()), notes

    def _leak_look(self) -> dict[str, set[str]]:
        from nodeagent.client import AgentClient, AgentError

        registered: dict[str, set[str]] = {}
        for node, url in self.agent_urls.items():
            try:
                registered[node] = {i.entity_id for i in AgentClient(url, self.token, timeout=3).instances()}
            except AgentError:
                registered[node] = set()
        instances = set(self.simulator().observe())
        rows = self.ledger.rows(
            f"""SELECT s.id::text, s.state, n.name, COALESCE(NULLIF(a.entity_id, ''), s.driver_ref), a.released_at IS NULL
                 FROM labs_labsession s JOIN labs_allocation a ON a.session_id = s.id
                 JOIN labs_card c ON c.id = a.card_id JOIN labs_node n ON n.id = c.node_id
                WHERE a.released_at IS NULL OR s.state IN {HOLDS!r}"""
        )
        live = {sid for sid, state, _, _, unreleased in rows if state in HOLDS}
        expected = collections.defaultdict(set)
        for _, state, node, ref, unreleased in rows:
            if unreleased and state in HOLDS and ref:
                expected[node].add(ref)
        return {
            "instances": instances - live,
            "registrations": {f"{node}:{ref}" for node, refs in registered.items() for ref in refs - expected[node]},
            "allocations": {sid for sid, state, _, _, unreleased in rows if unreleased and state not in HOLDS},
        }

    def lost(self, *, since: float) -> tuple[int, list[str]]:
        """Running labs that ended since ``since`` without their student asking (injected ones aside)."""
        rows = self.ledger.rows(
            """SELECT id::text, state, reason_code FROM labs_labsession
                WHERE running_at IS NOT NULL AND ended_at >= to_timestamp(%s)""",
            [since],
        )
        lost = [(sid, state, code) for sid, state, code in rows if sid not in self.stop_requested and sid not in self.injected]
        codes = collections.Counter(f"{state} ({code})" for _, state, code in lost)
        return len(lost), [f"lost: {dict(codes)}"] if lost else []

    def stuck_elsewhere(self, *, before: float, items: list[Item]) -> int:
        """Sessions of earlier faults still admitted, starting or stopping now: they had their time."""
        mine = {item.session_id for item in items}
        rows = self.ledger.rows(
            f"SELECT id::text FROM labs_labsession WHERE state IN {IN_PROGRESS!r} AND created_at < to_timestamp(%s)",
            [before],
        )
        return sum(1 for (sid,) in rows if sid not in mine)
