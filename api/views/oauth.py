"""OAuth 2.0 token introspection (RFC 7662) for the institutions' OAuth clients (``api.oauth``).

A client authenticates with its id and secret (HTTP Basic, or ``client_id`` and
``client_secret`` in the form) and learns about its own access tokens only: any other token,
another client's of the same or another institution included, is ``{"active": false}``, as an
unknown one is. Revocation (RFC 7009) is DOT's ``RevokeTokenView`` as it is: it revokes only
tokens of the client that asks. Both are form POSTs, not part of the REST schema."""

from __future__ import annotations

import base64
import binascii
import hashlib
from urllib.parse import unquote_plus

from django.http import HttpRequest, HttpResponse, JsonResponse
from oauth2_provider.models import get_access_token_model
from oauth2_provider.views import IntrospectTokenView


def _client_id(request: HttpRequest) -> str:
    """The client id the request authenticated with (RFC 6749 2.3.1: Basic, else the form's)."""
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            return unquote_plus(base64.b64decode(credentials, validate=True).decode("utf-8").partition(":")[0])
        except (binascii.Error, UnicodeDecodeError):
            return ""
    return request.POST.get("client_id", "")


class ClientIntrospectTokenView(IntrospectTokenView):
    http_method_names = ["post", "options"]

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        token = request.POST.get("token")
        if token is None:
            return self.get_token_response(None)
        checksum = hashlib.sha256(token.encode("utf-8")).hexdigest()
        own = get_access_token_model().objects.filter(token_checksum=checksum, application__client_id=_client_id(request))
        if not _client_id(request) or not own.exists():
            return JsonResponse({"active": False})
        return self.get_token_response(token)
