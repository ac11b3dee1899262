"""The capacity snapshot the allocation pass reads: what the ledger holds, exactly."""

from labs.models import Allocation
from labs.selectors.capacity import capacity_snapshot
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch


def test_the_snapshot_carries_every_live_allocation_with_its_session_and_start_time(world):
    sessions = [session_launch(student=s, course=world["course"], template=world["small"]) for s in world["students"][:3]]
    allocation_pass()

    snapshot = capacity_snapshot()

    held = {i.key: i for node in snapshot for card in node.cards for i in card.instances}
    assert set(held) == {str(s.pk) for s in sessions}
    for allocation in Allocation.objects.all():
        instance = held[str(allocation.session_id)]
        assert (instance.core_percent, instance.memory_mib, instance.course_id) == (5, 4096, world["course"].pk)
        assert abs(instance.started_at - allocation.created_at.timestamp()) < 1e-3
