"""Daphne's HTTP requests without Twisted's parse of a posted form, which nothing reads.

Twisted's ``http.Request.requestReceived`` parses the body of every POST whose content type is a
form (``application/x-www-form-urlencoded`` or ``multipart/form-data``) into ``request.args``,
finding the content type through the standard library's ``email`` header parser. Daphne's
``WebRequest`` never reads ``args``: it hands the raw body to the ASGI application, and Django
parses it again. The content type's parse alone costs 37 µs of CPU a form POST (58 µs for a
multipart one's), and a multipart body (a roster upload) was parsed whole, by the ``email``
package, before Django parsed it. Under ``make load`` two requests in three are a form POST (a
launch or a stop).

Twisted has a switch for it (``Request(..., parsePOSTFormSubmission=False)``); Daphne builds its
requests without passing it. ``daphne_form_parse_skipped`` (called by ``portal.asgi`` when the
process is Daphne's) has Daphne build them from a subclass that turns it off. A multipart body that
Twisted could not parse was answered 400 by Twisted itself; it now reaches Django, which answers
it as it answers any other bad request.
"""

from __future__ import annotations

import sys


def daphne_form_parse_skipped() -> bool:
    """In a process Daphne serves (its ``http_protocol`` imported before the application), make its
    requests skip Twisted's form parse; ``True`` when they do (now or already)."""
    module = sys.modules.get("daphne.http_protocol")
    if module is None:
        return False
    if getattr(module.WebRequest, "form_parse_skipped", False):
        return True

    class WebRequest(module.WebRequest):
        form_parse_skipped = True

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._parsePOSTFormSubmission = False

    # Daphne's HTTPFactory.buildProtocol names its request class through the module at each new
    # connection (``protocol.requestFactory = WebRequest``).
    module.WebRequest = WebRequest
    return True
