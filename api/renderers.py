"""The API's JSON, written by orjson: DRF's ``JSONRenderer`` answer, byte for byte, in a tenth of the time.

DRF writes JSON with the standard library's encoder, in Python for every value of a page; a page of
500 sessions (what an LMS polling a class start reads) spent about 1 ms of the web process's CPU
there, and the times in it were each formatted in Python before that (``api.serializers.
session_rows_data`` now leaves them to this renderer). orjson writes the same text in C: compact
separators, UTF-8 (DRF's ``UNICODE_JSON``), times as DRF's ``DateTimeField`` and encoder write
them (ISO 8601, ``Z`` for an offset of zero), U+2028 and U+2029 escaped as DRF escapes them.
Anything orjson does not know (lazy translations, decimals, querysets...) goes to DRF's own encoder
(``default``). Two cases keep DRF's renderer: an indented answer (``Accept: application/json;
indent=4``), and a value neither can write, so that its error stays DRF's. One difference: a float
that is not a number (NaN, infinity) is written ``null`` where DRF's strict JSON refuses it; the API
returns no such number. ``tests/api/test_renderer.py`` holds the two renderers to the same bytes.
"""

from __future__ import annotations

import orjson
from rest_framework import renderers
from rest_framework.utils.encoders import JSONEncoder

OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS


class JSONRenderer(renderers.JSONRenderer):
    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if data is None:
            return b""
        if self.ensure_ascii or not self.compact or self.get_indent(accepted_media_type, renderer_context or {}) is not None:
            return super().render(data, accepted_media_type, renderer_context)
        try:
            text = orjson.dumps(data, default=_drf_default, option=OPTIONS)
        except orjson.JSONEncodeError:
            return super().render(data, accepted_media_type, renderer_context)  # its error, as DRF raises it
        if b"\xe2\x80\xa8" in text or b"\xe2\x80\xa9" in text:
            text = text.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        return text


_drf_default = JSONEncoder().default
