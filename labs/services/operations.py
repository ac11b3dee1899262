"""What operators do: to the fleet, drain and undrain nodes, mark cards unhealthy or healthy,
stop a session (each takes a reason and tells the cluster page); to tenancy, an institution's
allotment, allow-list and operators. Each changes one thing in one transaction and records it
in the audit log."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from labs.dispatch import controller_wake
from labs.domain.reasons import Reason
from labs.models import Affiliation, AllowedImage, Card, Institution, InstitutionRole, LabSession, Node
from labs.models.catalog import serving_image
from labs.services.affiliations import affiliation_ensure
from labs.services.audit import audit_record
from labs.services.evacuation import evacuation_cancel
from labs.services.events import cluster_changed_publish, events_batch
from labs.services.sessions import session_stop

ALLOTMENT_FIELDS = ("allot_instances", "allot_core_percent", "allot_memory_mib", "allow_overcommit")


def node_drain(*, node: Node, by, reason: str) -> bool:
    """No new placements on ``node``; running sessions continue. ``False`` if already drained."""
    with transaction.atomic():
        changed = Node.objects.filter(pk=node.pk, drained=False).update(
            drained=True, drain_reason=reason[:300], drained_at=timezone.now()
        )
        if changed:
            audit_record(
                by=by,
                action="node.drain",
                target=f"node {node.name}",
                before={"drained": False},
                after={"drained": True, "reason": reason},
            )
            cluster_changed_publish()
    return bool(changed)


def node_undrain(*, node: Node, by, reason: str = "") -> bool:
    """New placements on ``node`` again; an evacuation under way is cancelled (its labs run on)."""
    with events_batch(), transaction.atomic():
        withdrawn = evacuation_cancel(node=node)
        changed = Node.objects.filter(pk=node.pk, drained=True).update(drained=False, drain_reason="", drained_at=None)
        if changed:
            cancelled = {} if withdrawn is None else {"evacuation_cancelled": True, "labs_run_on": len(withdrawn)}
            audit_record(
                by=by,
                action="node.undrain",
                target=f"node {node.name}",
                before={"drained": True},
                after={"drained": False, "reason": reason, **cancelled},
            )
            controller_wake()  # queued sessions may fit there now
            cluster_changed_publish()
    return bool(changed)


def card_set_disabled(*, card: Card, by, disabled: bool, reason: str) -> bool:
    """Mark a card unhealthy (no new placements on it; what runs there goes on) or healthy again."""
    with transaction.atomic():
        changed = Card.objects.filter(pk=card.pk, disabled=not disabled).update(
            disabled=disabled, disabled_reason=reason[:300] if disabled else ""
        )
        if changed:
            audit_record(
                by=by,
                action="card.unhealthy" if disabled else "card.healthy",
                target=f"{card.node.name}/npu{card.index}",
                before={"marked_unhealthy": not disabled},
                after={"marked_unhealthy": disabled, "reason": reason},
            )
            if not disabled:
                controller_wake()
            cluster_changed_publish()
    return bool(changed)


def session_stop_by_operator(*, session: LabSession, by, reason: str) -> bool:
    with transaction.atomic():
        stopped = session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who=by.get_username()))
        if stopped:
            audit_record(
                by=by,
                action="session.stop",
                target=f"session {session.pk} of {session.student.get_username()} in {session.course.code}",
                institution=session.course.institution,
                before={"state": session.state},
                after={"reason": reason},
            )
    return stopped


# --- tenancy ---------------------------------------------------------------------------------


def institution_set_allotment(*, institution: Institution, by, values: dict) -> None:
    """What ``institution`` may guarantee in total (``None``: no limit) and whether its courses may
    be guaranteed past what the cluster holds beside the others (overcommit), from validated ``values``."""
    with transaction.atomic():
        before = {f: getattr(institution, f) for f in ALLOTMENT_FIELDS}
        for f in ALLOTMENT_FIELDS:
            setattr(institution, f, values[f])
        institution.save(update_fields=list(ALLOTMENT_FIELDS))
        audit_record(
            by=by,
            action="institution.allotment",
            target=institution.name,
            institution=institution,
            before=before,
            after={f: values[f] for f in ALLOTMENT_FIELDS},
        )


def allowlist_add(
    *, institution: Institution, by, kind: str, reference: str, image: str = "", label: str = ""
) -> AllowedImage | None:
    """Allow an image (JupyterLab) or a model (vLLM) for the institution's templates; ``None`` if it is
    already allowed. A vLLM model runs in ``image``, or in the site's ``LAB_VLLM_IMAGE`` when that is empty."""
    image = serving_image(kind, image)
    with transaction.atomic():
        entry, created = AllowedImage.objects.get_or_create(
            institution=institution, kind=kind, reference=reference, defaults={"label": label, "image": image}
        )
        if not created:
            return None
        audit_record(
            by=by,
            action="allowlist.add",
            target=f"{kind} {reference}",
            institution=institution,
            after=_allowlist_audit(entry),
        )
    return entry


def _allowlist_audit(entry: AllowedImage) -> dict[str, str]:
    return {"kind": entry.kind, "reference": entry.reference, **({"image": entry.image} if entry.image else {})}


def allowlist_remove(*, image: AllowedImage, by) -> None:
    """Templates made from it keep running; new ones can no longer name it."""
    with transaction.atomic():
        audit_record(
            by=by,
            action="allowlist.remove",
            target=f"{image.kind} {image.reference}",
            institution=image.institution,
            before=_allowlist_audit(image),
        )
        image.delete()


def operator_add(*, institution: Institution, user, by) -> bool:
    """Make ``user`` an operator of ``institution``; ``False`` if they are one already."""
    with transaction.atomic():
        _role, created = InstitutionRole.objects.get_or_create(
            user=user, institution=institution, role=InstitutionRole.Role.OPERATOR
        )
        if created:
            affiliation_ensure(user_ids=[user.pk], institution=institution, source=Affiliation.Source.ROLE)
            audit_record(by=by, action="operator.add", target=user.get_username(), institution=institution)
    return created


def operator_remove(*, institution: Institution, user, by) -> bool:
    """``False`` if ``user`` did not operate ``institution``."""
    with transaction.atomic():
        removed, _count = InstitutionRole.objects.filter(
            user=user, institution=institution, role=InstitutionRole.Role.OPERATOR
        ).delete()
        if removed:
            audit_record(by=by, action="operator.remove", target=user.get_username(), institution=institution)
    return bool(removed)
