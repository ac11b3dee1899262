"""django-csp's middleware, with the header of a response that adds nothing to the policy built once.

``csp.middleware.CSPMiddleware`` builds the Content-Security-Policy header from the settings on
every response (``csp.utils.build_policy``, and again for the report-only header): about 0.1 ms
of CPU a request, the same string each time unless the view changed the policy (a response's
``_csp_config``, ``_csp_update`` or ``_csp_replace``, or their ``_ro`` forms, as django-csp's
decorators set them) or the page asked for a nonce (``request.csp_nonce``). Here such a
response goes through django-csp's own ``process_response``; every other gets the header built
once from the settings (again when a setting is replaced, as ``override_settings`` does), set
under django-csp's own conditions (not already set, not exempted, not under an excluded prefix;
nothing for Django's debug pages). docs/framework-overrides.md, "The CSP header".
"""

from __future__ import annotations

from csp.constants import HEADER, HEADER_REPORT_ONLY
from csp.middleware import CheckableLazyObject
from csp.middleware import CSPMiddleware as LibraryCSPMiddleware
from csp.utils import build_policy
from django.conf import settings
from django.http import HttpRequest
from django.http.response import HttpResponseBase

# What a view sets on its response to change the policy (django-csp's decorators).
RESPONSE_PARTS = ("_csp_config", "_csp_update", "_csp_replace", "_csp_config_ro", "_csp_update_ro", "_csp_replace_ro")
# Django's debug pages get no header when DEBUG is on (django-csp's rule).
DEBUG_PAGES = (404, 500)


class CSPMiddleware(LibraryCSPMiddleware):
    def __init__(self, get_response) -> None:
        super().__init__(get_response)
        # (the enforced setting, the report-only one, their headers): rebuilt when a setting is replaced.
        self.built: tuple[object, object, str, str] | None = None

    def policies(self) -> tuple[dict, dict, str, str]:
        """The two settings and the headers they give a response that adds nothing."""
        enforced = getattr(settings, "CONTENT_SECURITY_POLICY", None)
        report_only = getattr(settings, "CONTENT_SECURITY_POLICY_REPORT_ONLY", None)
        built = self.built
        if built is None or built[0] is not enforced or built[1] is not report_only:
            built = self.built = (enforced, report_only, build_policy(), build_policy(report_only=True))
        return enforced or {}, report_only or {}, built[2], built[3]

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if getattr(request, "_csp_nonce", None) is not None or any(
            getattr(response, part, None) is not None for part in RESPONSE_PARTS
        ):
            return super().process_response(request, response)
        if response.status_code in DEBUG_PAGES and settings.DEBUG:
            return response
        enforced, report_only, header, header_ro = self.policies()
        for name, value, exempt, policy in (
            (HEADER, header, "_csp_exempt", enforced),
            (HEADER_REPORT_ONLY, header_ro, "_csp_exempt_ro", report_only),
        ):
            if not value or name in response or getattr(response, exempt, False) is not False:
                continue
            if not request.path_info.startswith(tuple(policy.get("EXCLUDE_URL_PREFIXES", None) or ())):
                response[name] = value
        # As django-csp's: a nonce asked for after the header is written is an error, not a new nonce.
        request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)
        return response
