"""A per-session JSON record store in one directory, shared by every process on the machine.

Layout under ``path`` (mode 0700)::

    <session_id>.json    the record, mode 0600 (records may hold a lab's secret)
    <session_id>.lock    exists while someone holds or waits for the session's lock

Writes go to a temporary file that replaces the record with ``os.replace``, so a reader never
sees half a record and ``read`` needs no lock. Read-modify-write sequences hold ``lock``.
Session ids are validated as UUIDs and normalised to their canonical form, so an id can never
name a path outside the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from labs.drivers.base import DriverError, canonical_session_id

RECORD_SUFFIX = ".json"
LOCK_SUFFIX = ".lock"


class StateDir:
    """JSON records keyed by session id, safe to use from several processes at once."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        # mkdir's mode is masked by the umask and ignored for an existing directory.
        os.chmod(self.path, 0o700)

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
        ids = set()
        for entry in self.path.glob(f"*{RECORD_SUFFIX}"):
            stem = entry.name[: -len(RECORD_SUFFIX)]
            with contextlib.suppress(DriverError):
                if canonical_session_id(stem) == stem:
                    ids.add(stem)
        return ids
