"""The state directory shared by the drivers' processes."""

from __future__ import annotations

import multiprocessing
import stat
import time
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


def test_records_are_every_record_as_read_and_nothing_else(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    ids = [str(uuid.uuid4()) for _ in range(3)]
    for n, session_id in enumerate(ids):
        state.write(session_id, {"n": n, "nested": {"card": n}})
    with state.lock(ids[0]):  # a lock file beside the records
        (tmp_path / "foreign-1234.json").write_text('{"uid": "1234"}')  # the simulator's other files
        (tmp_path / "api-faults.json").write_text("{}")
        (tmp_path / f"{ids[1].upper()}.json").write_text('{"n": 99}')  # not a canonical id: not a record

        records = state.records()

    assert set(records) == set(ids) == state.session_ids()
    assert {sid: dict(record) for sid, record in records.items()} == {sid: state.read(sid) for sid in ids}


def test_records_show_every_change_another_process_makes_however_soon(tmp_path: Path) -> None:
    """Read again and again while another StateDir (another process's) replaces records with
    ones of the same size, removes and adds them: never an old record."""
    looking, writing = StateDir(tmp_path), StateDir(tmp_path)
    kept, changed, removed = (str(uuid.uuid4()) for _ in range(3))
    writing.write(kept, {"card": 1})
    writing.write(changed, {"card": 1})
    writing.write(removed, {"card": 1})
    assert looking.records()[changed] == {"card": 1}

    for card in range(2, 10):  # the same size each time, within the kernel's clock tick
        writing.write(changed, {"card": card})
        assert looking.records()[changed] == {"card": card}
    writing.remove(removed)
    added = str(uuid.uuid4())
    writing.write(added, {"card": 7})

    assert {sid: dict(record) for sid, record in looking.records().items()} == {
        kept: {"card": 1},
        changed: {"card": 9},
        added: {"card": 7},
    }


def test_a_settled_record_is_kept_until_its_file_changes(tmp_path: Path) -> None:
    """A record a second old is parsed once and kept; replaced, it is read again."""
    state = StateDir(tmp_path)
    kept, changed = str(uuid.uuid4()), str(uuid.uuid4())
    state.write(kept, {"card": 1})
    state.write(changed, {"card": 1})
    time.sleep(1.1)  # settled: changed more than a second before it is parsed
    first = state.records()

    StateDir(tmp_path).write(changed, {"card": 2})
    second = state.records()

    assert second == {kept: {"card": 1}, changed: {"card": 2}}
    assert second[kept] is first[kept]  # not parsed again
