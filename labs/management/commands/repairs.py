from django.core.management.base import BaseCommand

from labs.models import RepairEvent


class Command(BaseCommand):
    help = "List what the reconciler found and repaired, newest first."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--limit", type=int, default=50)
        parser.add_argument("--kind", choices=[k.value for k in RepairEvent.Kind], help="only events of this kind")
        parser.add_argument("--node", help="only events on this node")

    def handle(self, *args, limit: int, kind: str | None, node: str | None, **options) -> None:
        events = RepairEvent.objects.select_related("node")
        if kind:
            events = events.filter(kind=kind)
        if node:
            events = events.filter(node__name=node)
        for event in events[:limit]:
            where = event.node.name if event.node else "-"
            self.stdout.write(
                f"{event.created_at:%Y-%m-%d %H:%M:%S}  {event.kind:<22} {where:<16} {event.entity_id or '-':<38} {event.message}"
            )
