"""A per-session JSON record store in one directory, shared by every process on the machine.

Layout under ``path`` (mode 0700)::

    <session_id>.json    the record, mode 0600 (records may hold a lab's secret)
    <session_id>.lock    exists while someone holds or waits for the session's lock

Writes go to a temporary file that replaces the record with ``os.replace``, so a reader never
sees half a record and ``read`` needs no lock. Read-modify-write sequences hold ``lock``.
Session ids are validated as UUIDs and normalised to their canonical form, so an id can never
name a path outside the directory.

``records`` reads every record for a look at all of them (the simulator's ``observe``, which the
controller calls every round): a record is parsed again only when its file was replaced (a write
makes a new file: another inode), so a look at a thousand labs of which a few changed stats a
thousand files and opens a few, where it opened and parsed them all (56 % of a controller
round's CPU with 1,024 labs running: the stand-in cluster's work, not the portal's).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from labs.drivers.base import canonical_session_id

RECORD_SUFFIX = ".json"
LOCK_SUFFIX = ".lock"
# How long after its last change a record's file is taken as settled by ``records``.
SETTLED_NS = 1_000_000_000
# A record's file name: the canonical form of a UUID (what ``canonical_session_id`` gives) and the suffix.
RECORD_NAME = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.json")


class StateDir:
    """JSON records keyed by session id, safe to use from several processes at once."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        # mkdir's mode is masked by the umask and ignored for an existing directory.
        os.chmod(self.path, 0o700)
        # What ``records`` parsed, by session id: the file's identity then, and the record.
        self._parsed: dict[str, tuple[tuple[int, ...] | None, dict[str, Any]]] = {}

    def _record_path(self, session_id: str) -> Path:
        return self.path / f"{canonical_session_id(session_id)}{RECORD_SUFFIX}"

    @contextlib.contextmanager
    def lock(self, session_id: str, *, blocking: bool = True) -> Iterator[str]:
        """Hold the session's exclusive lock; yields the canonical session id.

        Waits for the lock, or with ``blocking=False`` raises ``BlockingIOError`` when another
        holder has it. Not re-entrant: taking it again inside the block, even in the same
        process, deadlocks.
        """
        sid = canonical_session_id(session_id)
        lock_path = self.path / f"{sid}{LOCK_SUFFIX}"
        while True:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
                # The holder before us may have unlinked the lock file (see below); a lock on
                # an unlinked inode excludes nobody, so start again on the current file.
                try:
                    current = os.stat(lock_path)
                except FileNotFoundError:
                    current = None
                held = os.fstat(fd)
                if current is not None and (current.st_ino, current.st_dev) == (held.st_ino, held.st_dev):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        try:
            yield sid
        finally:
            try:
                # Unlinking while still holding the lock keeps the directory free of stale lock
                # files; waiters notice the inode change and retry.
                if not self._record_path(sid).exists():
                    lock_path.unlink(missing_ok=True)
            finally:
                os.close(fd)

    def read(self, session_id: str) -> dict[str, Any] | None:
        """The session's record, or ``None`` when it has none."""
        try:
            with open(self._record_path(session_id), encoding="utf-8") as fh:
                return json.load(fh)
        except FileNotFoundError:
            return None

    def write(self, session_id: str, data: dict[str, Any]) -> None:
        """Replace the session's record atomically."""
        target = self._record_path(session_id)
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".", suffix=".tmp")  # mkstemp creates it 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def remove(self, session_id: str) -> None:
        """Remove the session's record; a missing record is not an error."""
        self._record_path(session_id).unlink(missing_ok=True)

    def session_ids(self) -> set[str]:
        """The session ids that have a record."""
        with os.scandir(self.path) as entries:
            return {match[1] for entry in entries if (match := RECORD_NAME.fullmatch(entry.name))}

    def records(self) -> Mapping[str, Mapping[str, Any]]:
        """Every record, by session id, as the directory holds them now. Read-only: a change
        goes through ``lock``, ``read`` and ``write``.

        A record is parsed again unless its file is the one parsed last time: the same inode,
        change time and size (``write`` replaces the file). A file changed less than a second
        before it was parsed is parsed again next time too: the kernel stamps change times on a
        coarse clock, so a second write in the same few milliseconds could reuse the freed inode
        with the same stamp and size."""
        parsed: dict[str, tuple[tuple[int, ...] | None, dict[str, Any]]] = {}
        for sid in self.session_ids():
            path = os.path.join(self.path, sid + RECORD_SUFFIX)
            known = self._parsed.get(sid)
            try:
                if known is not None and known[0] is not None and _identity(os.stat(path)) == known[0]:
                    parsed[sid] = known
                    continue
                with open(path, "rb") as fh:
                    # The identity of the file opened: a write that replaced it after the stat
                    # above cannot pair the old identity with the new text.
                    st = os.fstat(fh.fileno())
                    settled = time.time_ns() - st.st_ctime_ns > SETTLED_NS
                    parsed[sid] = (_identity(st) if settled else None, json.loads(fh.read()))
            except FileNotFoundError:
                continue  # removed since the directory was listed
        self._parsed = parsed  # the removed records go
        return {sid: record for sid, (_, record) in parsed.items()}


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """A file's identity for ``records``: another file (``write`` makes a new one) or a change in
    place (its change time) gives another."""
    return (st.st_ino, st.st_dev, st.st_ctime_ns, st.st_size)
