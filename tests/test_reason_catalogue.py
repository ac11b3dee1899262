"""The Simplified Chinese catalogue of reasons: complete and used (tests/test_catalogue.py checks the rest)."""

import gettext
import re
from pathlib import Path

from django.utils import translation

from labs.domain.reasons import AMOUNTS, MESSAGES, Reason
from labs.models import LabSession

LOCALE = Path(__file__).resolve().parents[1] / "locale" / "zh_Hans" / "LC_MESSAGES"
PLACEHOLDER = re.compile(r"%\(\w+\)s|%%")
# Kubernetes' units, which the pages never show: memory is in GiB and CPU in cores.
RAW_UNITS = re.compile(r"MiB|millicore|毫核", re.IGNORECASE)
# Words that read the same in both languages.
SAME_IN_CHINESE = {"session.driver", "amount.gib"}


def compiled() -> gettext.GNUTranslations:
    assert (LOCALE / "django.mo").exists(), "run make compilemessages"
    with open(LOCALE / "django.mo", "rb") as fh:
        return gettext.GNUTranslations(fh)


def test_every_reason_has_a_chinese_translation_with_the_same_placeholders():
    catalogue = compiled()
    for code, english in MESSAGES.items():
        chinese = catalogue.gettext(english)
        assert chinese != english or code in SAME_IN_CHINESE, code
        assert sorted(PLACEHOLDER.findall(chinese)) == sorted(PLACEHOLDER.findall(english)), code


def test_a_stored_reason_is_shown_in_the_readers_language():
    stored = Reason.of("quota.instances", used=3, limit=3).to_json()
    session = LabSession(reason_code=stored["code"], reason_params=stored["params"])
    with translation.override("zh-hans"):
        assert session.reason == "课程配额：已使用 3 / 3 个实例"
    with translation.override("en"):
        assert session.reason == "course quota: 3 of 3 instances in use"


def test_no_reason_says_mib_or_millicores_in_either_language():
    catalogue = compiled()
    for code, english in MESSAGES.items():
        for text in (english, catalogue.gettext(english)):
            assert not RAW_UNITS.search(PLACEHOLDER.sub("", text)), f"{code}: {text}"


def test_every_amount_is_a_placeholder_of_its_message():
    for code, units in AMOUNTS.items():
        assert {f"%({name})s" for name in units} <= set(PLACEHOLDER.findall(MESSAGES[code])), code
    for code, english in MESSAGES.items():
        for name in re.findall(r"%\((\w+_(?:mib|millicores))\)s", english):
            assert name in AMOUNTS.get(code, {}), f"{code}: {name} is an amount but is shown as a bare number"


def test_a_stored_reason_shows_memory_in_gib_and_cpu_in_cores():
    memory = Reason.of("quota.host_memory", used=6144, limit=7680, need=1536).to_json()
    cpu = Reason.of("node.host_cpu_too_small", need_millicores=190000, largest_millicores=1000).to_json()
    memory_session = LabSession(reason_code=memory["code"], reason_params=memory["params"])
    cpu_session = LabSession(reason_code=cpu["code"], reason_params=cpu["params"])
    with translation.override("en"):
        assert memory_session.reason == "course quota: host memory: 6 GiB of 7.5 GiB in use; needs 1.5 GiB more"
        assert cpu_session.reason == "node CPU: needs 190 cores; the largest node has 1 core for lab sessions"
    with translation.override("zh-hans"):
        assert memory_session.reason == "课程配额：主机内存已用 6 GiB / 7.5 GiB；还需要 1.5 GiB"
        assert cpu_session.reason == "节点 CPU：需要 190 核；最大的节点只有 1 核 可供实验会话使用"


def test_an_amount_is_rounded_to_three_decimals():
    assert str(Reason.of("card.too_small", need_mib=128, largest_mib=100)) == (
        "card memory: needs 0.125 GiB; the largest card has 0.098 GiB"
    )
    assert str(Reason.of("quota.host_cpu_cap", need_millicores=2500, limit_millicores=250)) == (
        "course quota: needs 2.5 cores of host CPU; the course can hold at most 0.25 cores"
    )
