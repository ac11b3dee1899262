from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from accounts import views as accounts_views
from api import token_pages
from labs.metrics import metrics
from webhooks import subscription_pages

urlpatterns = [
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/login/", accounts_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/invitation/<uidb64>/<token>/", accounts_views.InvitationView.as_view(), name="invitation"),
    # Django's set_language (the URL django.conf.urls.i18n gives it), keeping a signed-in user's choice.
    path("i18n/setlang/", accounts_views.set_language, name="set_language"),
    path("", include("lti.urls")),
    path("api/v1/", include("api.urls")),
    path("ops/tokens/", token_pages.tokens, name="ops-tokens"),
    path("ops/tokens/<int:token_id>/revoke/", token_pages.token_revoke, name="ops-token-revoke"),
    path("ops/tokens/oauth/<int:client_id>/revoke/", token_pages.oauth_client_revoke, name="ops-oauth-client-revoke"),
    path("ops/webhooks/", subscription_pages.webhooks, name="ops-webhooks"),
    path("ops/webhooks/<int:subscription_id>/", subscription_pages.webhook_detail, name="ops-webhook"),
    path("", include("labs.urls")),
]

handler404 = "portal.errors.page_not_found"
