from django.core.management.base import BaseCommand

from labs.services.demo import DEMO_STUDENTS, demo_data_load


class Command(BaseCommand):
    help = "Load the demo institution, course, templates and node (idempotent)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--students", type=int, default=DEMO_STUDENTS)

    def handle(self, *args, students: int, **options) -> None:
        result = demo_data_load(students=students)
        self.stdout.write(f"demo data: course {result['course']}, {result['students']} students")
