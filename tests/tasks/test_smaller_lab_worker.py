"""A real Celery worker's allocation pass offers the smaller lab, and the switched lab runs."""

import pytest

from labs.models import Allocation, LabSession
from labs.services.sessions import session_launch
from labs.services.smaller_lab import session_switch_smaller
from tests.conftest import wait_for
from tests.factories import smaller_lab_world


def state_of(session) -> str:
    return LabSession.objects.values_list("state", flat=True).get(pk=session.pk)


@pytest.mark.slow
def test_the_workers_pass_offers_the_smaller_lab_and_the_switched_lab_runs(start_worker):
    w = smaller_lab_world()
    worker = start_worker(LAB_SIMULATOR_DELAY_SECONDS="0.2")
    filler = session_launch(student=w["other_students"][0], course=w["other_course"], template=w["filler"])
    wait_for(lambda: state_of(filler) == "running", timeout=60, message=lambda: f"filler running:\n{worker.output()[-3000:]}")
    big = session_launch(student=w["students"][0], course=w["course"], template=w["big"])
    offer = wait_for(
        lambda: LabSession.objects.values_list("smaller_offer", flat=True).get(pk=big.pk),
        timeout=60,
        message=lambda: f"an offer on the queued lab:\n{worker.output()[-3000:]}",
    )
    assert offer == {"template": w["medium"].pk, "core_percent": 30, "memory_mib": 16 * 1024, "cards": 1}
    assert state_of(big) == "queued" and LabSession.objects.get(pk=big.pk).reason_code.startswith("card.")

    switched = session_switch_smaller(session_id=big.pk, student=w["students"][0], template_id=offer["template"])
    wait_for(lambda: state_of(switched.started) == "running", timeout=60, message="the smaller lab running")
    assert state_of(big) == "stopped"
    live = Allocation.objects.filter(released_at__isnull=True)
    assert sorted(live.values_list("session__template__slug", flat=True)) == ["filler", "medium"]
