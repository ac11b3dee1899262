"""Two students switch to the smaller lab at the same moment, with room for one: the allocation
lock lets one through, the other is told it no longer fits, and the card is never overcommitted."""

import threading

import pytest
from django.db import connection
from django.db.models import Sum

from labs.models import Allocation, LabSession
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from labs.services.smaller_lab import SwitchRefused, session_switch_smaller
from tests.factories import smaller_lab_world

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_switches_at_once_for_the_last_room_one_wins_and_the_other_is_told(db):
    w = smaller_lab_world()
    session_launch(student=w["other_students"][0], course=w["other_course"], template=w["filler"])
    allocation_pass()  # 40 % / 24 GiB left: one medium lab (30 % / 16 GiB) fits, not two
    queued = [session_launch(student=student, course=w["course"], template=w["big"]) for student in w["students"]]
    allocation_pass()
    for session in queued:
        session.refresh_from_db()
        assert session.smaller_offer["template"] == w["medium"].pk  # both are offered the one room

    start = threading.Barrier(len(queued))
    outcomes: dict[int, str] = {}

    def switch(index: int) -> None:
        try:
            start.wait()
            session_switch_smaller(session_id=queued[index].pk, student=w["students"][index], template_id=w["medium"].pk)
            outcomes[index] = "switched"
        except SwitchRefused as exc:
            outcomes[index] = " ".join(exc.messages)
        finally:
            connection.close()

    threads = [threading.Thread(target=switch, args=(i,)) for i in range(len(queued))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(outcomes.values())[1] == "switched", outcomes
    assert "no longer fits" in sorted(outcomes.values())[0], outcomes
    states = sorted(LabSession.objects.filter(pk__in=[s.pk for s in queued]).values_list("state", flat=True))
    assert states == ["queued", "stopped"]
    assert LabSession.objects.filter(template=w["medium"]).count() == 1
    live = Allocation.objects.filter(released_at__isnull=True)
    assert live.count() == 2
    assert live.aggregate(core=Sum("core_percent"))["core"] == 90
