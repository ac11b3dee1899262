"""The Simplified Chinese catalogue of reasons: complete and used (tests/test_catalogue.py checks the rest)."""

import gettext
import re
from pathlib import Path

from django.utils import translation

from labs.domain.reasons import MESSAGES, Reason
from labs.models import LabSession

LOCALE = Path(__file__).resolve().parents[1] / "locale" / "zh_Hans" / "LC_MESSAGES"
PLACEHOLDER = re.compile(r"%\(\w+\)s|%%")


def compiled() -> gettext.GNUTranslations:
    assert (LOCALE / "django.mo").exists(), "run make compilemessages"
    with open(LOCALE / "django.mo", "rb") as fh:
        return gettext.GNUTranslations(fh)


def test_every_reason_has_a_chinese_translation_with_the_same_placeholders():
    catalogue = compiled()
    for code, english in MESSAGES.items():
        chinese = catalogue.gettext(english)
        assert chinese != english or code == "session.driver", code
        assert sorted(PLACEHOLDER.findall(chinese)) == sorted(PLACEHOLDER.findall(english)), code


def test_a_stored_reason_is_shown_in_the_readers_language():
    stored = Reason.of("quota.instances", used=3, limit=3).to_json()
    session = LabSession(reason_code=stored["code"], reason_params=stored["params"])
    with translation.override("zh-hans"):
        assert session.reason == "课程配额：已使用 3 / 3 个实例"
    with translation.override("en"):
        assert session.reason == "course quota: 3 of 3 instances in use"
