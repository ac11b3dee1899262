"""A template on whole cards, launched: placed on that many empty cards of one node, held in the
ledger as all of each, charged to the course's quota so, and created as one instance of N cards."""

from __future__ import annotations

import pytest

from labs.models import Allocation, LabSession
from labs.selectors.capacity import capacity_snapshot
from labs.selectors.courses import course_quota_use
from labs.services.allocation import allocation_pass
from labs.services.catalog import fit_preview
from labs.services.controller import launch_spec
from labs.services.sessions import session_launch
from tests.factories import CARD_MIB, TemplateFactory, course_with_students, node_with_cards


@pytest.fixture
def two_cards(db):
    """One 8-card node, a course of 4 students (guarantee 300 %, 4 instances) offering a 2-whole-card template."""
    node = node_with_cards(cards=8)
    course, _, students, _ = course_with_students(4, quota={"core_percent": 300, "memory_mib": 8 * CARD_MIB, "instance_count": 4})
    template = TemplateFactory(
        institution=course.institution, name="pair", slug="pair", core_percent=100, memory_mib=CARD_MIB, card_count=2
    )
    course.templates.add(template)
    return {"node": node, "course": course, "template": template, "students": students}


def test_a_two_card_lab_is_placed_on_two_whole_empty_cards_of_one_node(two_cards):
    session = session_launch(student=two_cards["students"][0], course=two_cards["course"], template=two_cards["template"])

    result = allocation_pass()

    assert result.admitted == [str(session.pk)]
    allocation = Allocation.objects.get(session=session)
    assert (allocation.cards, allocation.core_percent, allocation.memory_mib) == (2, 200, 2 * CARD_MIB)
    cards = [allocation.card, *allocation.more_cards.all()]
    assert len({c.pk for c in cards}) == 2 and {c.node_id for c in cards} == {two_cards["node"].pk}
    # The engine sees both cards full (100 % and all their memory), the others empty.
    [node] = capacity_snapshot()
    held = {c.card_id: [(i.core_percent, i.memory_mib, i.cards) for i in c.instances] for c in node.cards}
    assert {pk: held[pk] for pk in (c.pk for c in cards)} == {c.pk: [(100, CARD_MIB, 2)] for c in cards}
    assert sum(1 for c in node.cards if not c.instances) == 6


def test_a_two_card_lab_counts_200_percent_and_both_cards_memory_against_the_guarantee(two_cards):
    first, second = (
        session_launch(student=s, course=two_cards["course"], template=two_cards["template"]) for s in two_cards["students"][:2]
    )

    allocation_pass()

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == "admitted"
    use = course_quota_use(course=two_cards["course"])
    assert (use.core_percent, use.memory_mib, use.instances) == (200, 2 * CARD_MIB, 1)
    # 200 % more would pass the 300 % guarantee, though four cards are empty.
    assert second.state == "queued"
    assert second.reason.startswith("course quota")


def test_the_launch_spec_binds_the_instance_to_its_two_cards(two_cards):
    session = session_launch(student=two_cards["students"][0], course=two_cards["course"], template=two_cards["template"])
    allocation_pass()

    spec = launch_spec(LabSession.objects.select_related("allocation__card__node").get(pk=session.pk))

    assert (spec.card.cards, spec.card.core_percent, spec.card.memory_mib) == (2, 200, 2 * CARD_MIB)
    assert spec.instance_environment()["FLEXNPU_CARDS"] == "2"


def test_the_preview_counts_whole_card_labs_by_cards_and_by_the_guarantee(two_cards):
    preview = fit_preview(course=two_cards["course"], core_percent=100, memory_mib=CARD_MIB, scenario="development", card_count=2)

    # 8 cards hold four 2-card labs; the 300 % guarantee one.
    assert (preview.cluster, preview.cluster_empty, preview.quota, preview.quota_total) == (4, 4, 1, 1)


def test_a_two_card_lab_runs_on_the_simulator_and_its_release_frees_both_cards(two_cards):
    import time

    from labs.domain.reasons import Reason
    from labs.drivers import get_driver
    from labs.services.controller import reconcile_once
    from labs.services.sessions import session_stop

    driver = get_driver()
    session = session_launch(student=two_cards["students"][0], course=two_cards["course"], template=two_cards["template"])
    try:
        deadline = time.monotonic() + 10
        while session.state != "running":
            assert time.monotonic() < deadline, (session.state, session.reason)
            reconcile_once()
            session.refresh_from_db()
            time.sleep(0.05)
        assert session.allocation.placement == f"{two_cards['node'].name} / 2 whole NPUs from NPU 0"

        assert session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="tester"))
        while Allocation.objects.filter(session=session, released_at__isnull=True).exists():
            assert time.monotonic() < deadline + 10, "the allocation was never released"
            reconcile_once()
            time.sleep(0.05)

        [node] = capacity_snapshot()
        assert all(not c.instances for c in node.cards)
    finally:
        for session_id in driver.list():
            driver.delete(session_id)


def test_the_operators_views_show_each_of_the_two_cards_full(two_cards):
    from labs.selectors.metrics import card_use
    from labs.selectors.operations import cluster_state

    session_launch(student=two_cards["students"][0], course=two_cards["course"], template=two_cards["template"])
    allocation_pass()

    [node] = cluster_state()
    held = [(c.index, c.core_percent, c.memory_reserved_mib, c.instances) for c in node.cards if c.instances]
    assert held == [(0, 100, CARD_MIB, 1), (1, 100, CARD_MIB, 1)]
    assert node.sessions == 2  # one instance on each of its cards, as the engine counts it
    metrics = [(c.index, c.core_percent_reserved, c.memory_mib_reserved) for c in card_use() if c.instances]
    assert metrics == [(0, 100, CARD_MIB), (1, 100, CARD_MIB)]


def test_a_class_reservation_of_a_whole_card_template_is_refused_and_nothing_is_booked(two_cards):
    from datetime import timedelta

    from django.utils import timezone

    from labs.models import Reservation
    from labs.services.reservations import ReservationRefused, reservation_book

    start = timezone.now() + timedelta(days=1)
    with pytest.raises(ReservationRefused, match="pair runs on 2 whole cards; a class reservation holds labs on a share"):
        reservation_book(
            course=two_cards["course"], template=two_cards["template"], count=2, slots=[(start, start + timedelta(hours=2))]
        )
    assert not Reservation.objects.exists()
