"""The language switch and the login page: a signed-in user's language follows them to every device;
after repeated failed logins the page says the account is locked out (django-axes). The invitation
page: an account made without a password (a roster import) sets its first password there."""

from __future__ import annotations

import contextlib

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views import i18n

from accounts.selectors import preferred_language
from accounts.services import preference_set_language


def set_language(request: HttpRequest) -> HttpResponse:
    """Django's ``set_language`` (the language cookie, then back to ``next``); a signed-in user's
    choice is also kept with their account."""
    response = i18n.set_language(request)
    if request.method == "POST" and request.user.is_authenticated:
        # Like Django's view, a language the portal does not offer is ignored.
        with contextlib.suppress(ValueError):
            preference_set_language(user=request.user, language=request.POST.get(i18n.LANGUAGE_QUERY_PARAMETER, ""))
    return response


class LoginView(auth_views.LoginView):
    """Django's login; the response sets the language cookie to the user's own choice, if they made
    one, so pages and the websocket (``labs.consumers.reader_language``) use it on this device too."""

    def form_valid(self, form) -> HttpResponse:
        response = super().form_valid(form)
        if language := preferred_language(user=form.get_user()):
            set_language_cookie(response, language)
        return response


def set_language_cookie(response: HttpResponse, language: str) -> None:
    """The cookie exactly as Django's ``set_language`` sets it."""
    response.set_cookie(
        settings.LANGUAGE_COOKIE_NAME,
        language,
        max_age=settings.LANGUAGE_COOKIE_AGE,
        path=settings.LANGUAGE_COOKIE_PATH,
        domain=settings.LANGUAGE_COOKIE_DOMAIN,
        secure=settings.LANGUAGE_COOKIE_SECURE,
        httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
        samesite=settings.LANGUAGE_COOKIE_SAMESITE,
    )


def locked_out(request: HttpRequest, *args) -> HttpResponse:
    """django-axes' lockout response (``AXES_LOCKOUT_CALLABLE``): the login page, 429 Too Many
    Requests, saying how long logging in stays refused and whom to ask.

    axes passes the original response and the credentials; neither is needed (nor echoed).
    """
    minutes = max(1, int(settings.AXES_COOLOFF_TIME.total_seconds()) // 60)
    next_url = request.POST.get("next") or request.GET.get("next", "")
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        next_url = ""
    context = {"locked_out": True, "lockout_minutes": minutes, "next": next_url}
    response = render(request, "registration/login.html", context, status=429)
    response["Retry-After"] = str(minutes * 60)
    return response


class InvitationView(auth_views.PasswordResetConfirmView):
    """An invitation link, ``/accounts/invitation/<uidb64>/<token>/``: Django's password reset
    confirmation (``default_token_generator``: an HMAC of the account's state under the
    ``SECRET_KEY``, valid for ``PASSWORD_RESET_TIMEOUT``), for an account that has no password yet.

    The link works once: setting the password (or a first login) changes what the token was made
    of, and an account with a password is refused. As in Django, the token leaves the address at
    the first request (kept in the session, the page redirects to ``.../set-password/``), so no
    later request, referrer or log line carries it. A wrong, used or expired link gets a page
    saying so (400), and nothing changes.
    """

    template_name = "registration/invitation.html"
    success_url = reverse_lazy("login")

    def get_user(self, uidb64: str):
        user = super().get_user(uidb64)
        return None if user is None or user.has_usable_password() else user

    def form_valid(self, form) -> HttpResponse:
        response = super().form_valid(form)
        messages.success(self.request, _("Your password is set: log in with your username and your new password."))
        return response

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["invitation_days"] = max(1, settings.PASSWORD_RESET_TIMEOUT // 86400)
        return context

    def render_to_response(self, context, **kwargs) -> HttpResponse:
        if not self.validlink:
            kwargs.setdefault("status", 400)
        return super().render_to_response(context, **kwargs)
