"""The state directory shared by the drivers' processes."""

from __future__ import annotations

import multiprocessing
import stat
import uuid
from pathlib import Path

import pytest

from labs.drivers import DriverError
from labs.drivers.statefile import StateDir


def increment(path: str, session_id: str, times: int) -> None:
    state = StateDir(path)
    for _ in range(times):
        with state.lock(session_id):
            record = state.read(session_id) or {"count": 0}
            state.write(session_id, {"count": record["count"] + 1})


def create_and_remove(path: str, session_id: str, times: int) -> None:
    """Each removal unlinks the lock file, so waiters must re-take the lock on the new one."""
    state = StateDir(path)
    inside = Path(path, "inside")
    for _ in range(times):
        with state.lock(session_id):
            inside.touch(exist_ok=False)  # raises if another process is inside too
            if state.read(session_id) is None:
                state.write(session_id, {})
            else:
                state.remove(session_id)
            inside.unlink()


def test_records_round_trip_and_are_private(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    session_id = str(uuid.uuid4())

    state.write(session_id, {"secret": "s3cret"})

    assert state.read(session_id) == {"secret": "s3cret"}
    assert state.session_ids() == {session_id}
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / f"{session_id}.json").stat().st_mode) == 0o600


def test_remove_forgets_the_session_and_leaves_no_files(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    session_id = str(uuid.uuid4())
    with state.lock(session_id):
        state.write(session_id, {})

    with state.lock(session_id):
        state.remove(session_id)
    state.remove(session_id)

    assert state.read(session_id) is None
    assert state.session_ids() == set()
    assert list(tmp_path.iterdir()) == []


def test_ids_are_normalised_to_canonical_uuids(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    session_id = uuid.uuid4()

    state.write(str(session_id).upper(), {"n": 1})

    assert state.read(str(session_id)) == {"n": 1}
    assert state.session_ids() == {str(session_id)}


@pytest.mark.parametrize("session_id", ["../x", "/etc/passwd", "", "1234", None])
def test_an_id_that_is_not_a_uuid_is_refused(tmp_path: Path, session_id: str) -> None:
    state = StateDir(tmp_path)

    with pytest.raises(DriverError):
        state.write(session_id, {})
    with pytest.raises(DriverError):
        state.read(session_id)


def test_a_busy_lock_refuses_a_non_blocking_taker(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    session_id = str(uuid.uuid4())

    with state.lock(session_id), pytest.raises(BlockingIOError), state.lock(session_id, blocking=False):
        pass


def test_the_lock_serialises_processes(tmp_path: Path) -> None:
    session_id = str(uuid.uuid4())
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=increment, args=(str(tmp_path), session_id, 50)) for _ in range(4)]

    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)

    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    assert StateDir(tmp_path).read(session_id) == {"count": 200}


def test_the_lock_excludes_while_its_file_comes_and_goes(tmp_path: Path) -> None:
    session_id = str(uuid.uuid4())
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=create_and_remove, args=(str(tmp_path), session_id, 100)) for _ in range(4)]

    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)

    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
