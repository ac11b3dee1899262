from django.conf import settings
from django.db import migrations
from django.utils import timezone


def grace_json(seconds: int) -> dict:
    """``labs.domain.reasons.duration(seconds)`` as stored, written out as it was when this migration was."""
    if seconds >= 60 and seconds % 60 == 0:
        return {"code": "duration.minutes", "params": {"minutes": seconds // 60}}
    return {"code": "duration.seconds", "params": {"seconds": seconds}}


def say_the_grace(apps, schema_editor):
    """Budget warnings stored before their words named the grace (and the stop's time) get those
    parameters, so that the new words can be filled in when the cards are drawn."""
    LabSession = apps.get_model("labs", "LabSession")
    grace = grace_json(settings.LAB_BUDGET_GRACE_SECONDS)
    warned = LabSession.objects.filter(reason_code__in=["session.budget_warning", "session.budget_used_up"])
    for session in warned.only("pk", "reason_code", "reason_params", "budget_stop_at").iterator(chunk_size=500):
        params = {**(session.reason_params or {}), "grace": grace}
        if session.reason_code == "session.budget_used_up":
            stop_at = session.budget_stop_at or timezone.now()
            params["time"] = timezone.localtime(stop_at).strftime("%H:%M")
        LabSession.objects.filter(pk=session.pk).update(reason_params=params)


class Migration(migrations.Migration):

    dependencies = [
        ("labs", "0019_usage_split_at_the_claim"),
    ]

    # Back: the older words take no such parameters and ignore them.
    operations = [migrations.RunPython(say_the_grace, migrations.RunPython.noop)]
