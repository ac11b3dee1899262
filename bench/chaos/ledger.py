"""The ledger as the harness reads it, and the invariants watched on it throughout the run."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from dataclasses import dataclass

from bench.chaos.plan import DEV_CARD_CAP, DEV_NODE_CAP, HOLDS, INFERENCE_CARD_CAP, INFERENCE_NODE_CAP, TERMINAL


class Ledger:
    """The harness's reads of the portal's database (its own connection, reconnected after a
    restart or a terminated backend; named so the backend fault spares it)."""

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self.conn = None

    def _connect(self):
        import psycopg

        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=3, application_name=self.name)
        return self.conn

    def rows(self, sql: str, params: object = None, *, attempts: int = 120) -> list[tuple]:
        """The rows of one statement (none for a command), trying again for a minute while the database is away."""
        import psycopg

        for attempt in range(attempts):
            try:
                cursor = self._connect().execute(sql, params)
                return cursor.fetchall() if cursor.description else []
            except psycopg.OperationalError:
                with contextlib.suppress(Exception):
                    self.conn.close()
                self.conn = None
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def snapshot(self, queries: dict[str, str]) -> dict[str, list[tuple]]:
        """Several queries in one repeatable-read transaction: they see one moment of the ledger."""
        conn = self._connect()
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return {name: conn.execute(sql).fetchall() for name, sql in queries.items()}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.conn is not None:
                self.conn.close()


@dataclass
class Violation:
    at: float
    kind: str
    detail: str


INVARIANT_QUERIES = {
    "cards": """
        SELECT c.id, n.name, c.memory_mib, SUM(a.core_percent), SUM(a.memory_mib), COUNT(*),
               BOOL_OR(a.scenario = 'inference')
          FROM labs_allocation a JOIN labs_card c ON c.id = a.card_id JOIN labs_node n ON n.id = c.node_id
         WHERE a.released_at IS NULL GROUP BY c.id, n.name, c.memory_mib""",
    "holds": f"""
        SELECT s.id, s.state, a.id IS NOT NULL, a.released_at IS NULL
          FROM labs_labsession s LEFT JOIN labs_allocation a ON a.session_id = s.id
         WHERE (s.state IN {HOLDS!r} AND (a.id IS NULL OR a.released_at IS NOT NULL))
            OR (s.state NOT IN {HOLDS!r} AND a.id IS NOT NULL AND a.released_at IS NULL)""",
    "usage": """
        SELECT a.id, a.released_at IS NULL, COUNT(u.id)
          FROM labs_allocation a LEFT JOIN labs_usagerecord u ON u.allocation_id = a.id
         GROUP BY a.id
        HAVING (a.released_at IS NULL AND COUNT(u.id) > 0) OR (a.released_at IS NOT NULL AND COUNT(u.id) <> 1)""",
    "released": "SELECT id, released_at FROM labs_allocation WHERE released_at IS NOT NULL",
    "students": f"""
        SELECT student_id, COUNT(*) FROM labs_labsession WHERE state NOT IN {TERMINAL!r}
         GROUP BY student_id HAVING COUNT(*) > 1""",
    "states": "SELECT state, COUNT(*) FROM labs_labsession GROUP BY state",
}


class InvariantMonitor(threading.Thread):
    """Checks the ledger's invariants every ``interval`` seconds until stopped, in one snapshot each.

    Per card: Σ AI Core floors <= 100, Σ memory <= the card's, instances <= 16 (8 once an
    inference instance is there); per node <= 128 (64). The sessions in admitted, starting,
    running or stopping hold exactly one unreleased allocation and no other session holds one;
    a released allocation keeps its ``released_at`` and has exactly one usage record (a live one
    none); no student has two open sessions (the course allows one). Also remembers how close
    the cards came to each cap: the checks above can only fail where the class reaches them.
    """

    def __init__(self, url: str, interval: float = 0.5) -> None:
        super().__init__(name="invariants", daemon=True)
        self.ledger = Ledger(url, "chaos-monitor")
        self.interval = interval
        self.stopping = threading.Event()
        self.violations: list[Violation] = []
        self.samples = 0
        self.unavailable = 0
        self.released: dict[int, object] = {}
        self.max_core = 0
        self.max_memory_share = 0.0  # of the card's memory
        self.max_dev_instances = 0  # on a card without an inference instance
        self.max_inference_instances = 0  # on a card with one
        self.states: dict[str, int] = {}

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.check_once()
            except Exception:  # the database is restarting or the backend was terminated
                self.unavailable += 1
                self.ledger.close()
                self.ledger.conn = None

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)
        self.ledger.close()

    def flag(self, kind: str, detail: str) -> None:
        self.violations.append(Violation(time.time(), kind, detail))

    def check_once(self) -> None:
        seen = self.ledger.snapshot(INVARIANT_QUERIES)
        now_states = dict(seen["states"])
        per_node: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        for card_id, node, card_mib, core, mib, count, inference in seen["cards"]:
            cap = INFERENCE_CARD_CAP if inference else DEV_CARD_CAP
            if core > 100 or mib > card_mib or count > cap:
                self.flag(
                    "card over its limits", f"card {card_id} on {node}: {core} %, {mib} MiB of {card_mib}, {count} of {cap}"
                )
            per_node[node][0] += count
            per_node[node][1] |= bool(inference)
            self.max_core = max(self.max_core, core)
            self.max_memory_share = max(self.max_memory_share, mib / card_mib)
            if inference:
                self.max_inference_instances = max(self.max_inference_instances, count)
            else:
                self.max_dev_instances = max(self.max_dev_instances, count)
        for node, (count, inference) in per_node.items():
            cap = INFERENCE_NODE_CAP if inference else DEV_NODE_CAP
            if count > cap:
                self.flag("node over its limit", f"{node}: {count} instances of {cap}")
        for session_id, state, has, _live in seen["holds"]:
            what = "without an unreleased allocation" if state in HOLDS else "holding an unreleased allocation"
            self.flag("allocation out of step", f"{state} session {session_id} {what} (allocation {'yes' if has else 'none'})")
        for allocation_id, live, records in seen["usage"]:
            state = "live" if live else "released"
            self.flag("release not exactly once", f"{state} allocation {allocation_id} with {records} usage record(s)")
        for allocation_id, released_at in seen["released"]:
            before = self.released.setdefault(allocation_id, released_at)
            if before != released_at:
                self.flag("released twice", f"allocation {allocation_id} released at {before} and again at {released_at}")
                self.released[allocation_id] = released_at
        for student_id, count in seen["students"]:
            self.flag("two open sessions", f"student {student_id} has {count} open sessions (the course allows 1)")
        self.states = now_states
        self.samples += 1

    def between(self, start: float, end: float) -> list[Violation]:
        return [v for v in list(self.violations) if start <= v.at <= end]
