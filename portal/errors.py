"""The project's 404 handler: the API answers an unknown address in its own error body, every
other address gets the portal's page (templates/404.html).

Django calls ``handler404`` only once no URL matched and ``CommonMiddleware`` found no address with
a slash appended, so ``/api/v1/courses`` still redirects to ``/api/v1/courses/``.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework.exceptions import NotFound

from api.exceptions import error_body

API_PREFIX = "/api/"


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith(API_PREFIX):
        # DRF's own message, in the language the request asked for, as every other API 404.
        return JsonResponse(error_body("not_found", str(NotFound.default_detail)), status=404)
    return defaults.page_not_found(request, exception)
