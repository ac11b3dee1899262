import pytest
from django.template import Context, Template
from django.utils import translation

from labs.presentation import gib_text


@pytest.mark.parametrize(
    ("mib", "text"),
    [(524288, "512 GiB"), (4608, "4.5 GiB"), (128, "0.125 GiB"), (4096, "4 GiB"), (1536 * 1024, "1,536 GiB"), (None, "")],
)
def test_memory_is_shown_in_gib_never_as_a_raw_mib_count(mib, text):
    with translation.override("en"):
        assert gib_text(mib) == text


def test_the_filter_renders_in_templates():
    with translation.override("zh-hans"):
        assert Template("{% load units %}{{ m|gib }}").render(Context({"m": 65536})) == "64 GiB"
