"""Set a registration's LTI 1.1 consumer key and secret, and import the accounts its LTI 1.1 user
ids belong to, so that LTI 1.3 launches carrying the migration claim (``lti1p1``) reach them."""

import csv
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from lti import lti1p1
from lti.models import Lti11Consumer, Registration


class Command(BaseCommand):
    help = "Set a registration's LTI 1.1 consumer key and secret, or import 'lti11_user_id,username' rows for it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--registration", type=int, required=True, help="the registration's id (ops page)")
        parser.add_argument("--consumer-key", help="the LTI 1.1 consumer key")
        parser.add_argument("--secret-file", type=Path, help="a file holding the LTI 1.1 shared secret")
        parser.add_argument("--users", type=Path, help="a CSV file of 'lti11_user_id,username' rows")

    def handle(self, *args, **o) -> None:
        registration = Registration.objects.filter(pk=o["registration"]).select_related("institution").first()
        if registration is None:
            raise CommandError(f"no registration has the id {o['registration']}")
        if o["consumer_key"] or o["secret_file"]:
            if not (o["consumer_key"] and o["secret_file"]):
                raise CommandError("give --consumer-key and --secret-file together")
            try:
                secret = o["secret_file"].read_text()
                lti1p1.consumer_save(registration=registration, consumer_key=o["consumer_key"], shared_secret=secret)
            except (OSError, ValueError) as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(f"LTI 1.1 consumer key {o['consumer_key']!r} set for {registration.name}")
        if o["users"]:
            consumer = Lti11Consumer.objects.filter(registration=registration).first()
            if consumer is None:
                raise CommandError("set the LTI 1.1 consumer key first (--consumer-key and --secret-file)")
            try:
                with o["users"].open(newline="") as handle:
                    rows = [(row + ["", ""])[:2] for row in csv.reader(handle) if row]
            except OSError as exc:
                raise CommandError(str(exc)) from exc
            if rows and rows[0][0].strip().lower() == "lti11_user_id":
                rows = rows[1:]
            problems = lti1p1.users_import(consumer=consumer, rows=[(a, b) for a, b in rows])
            if problems:
                raise CommandError("nothing imported: " + "; ".join(problems))
            self.stdout.write(f"{len(rows)} LTI 1.1 user ids linked")
