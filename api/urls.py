from csp.decorators import csp_update
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from oauth2_provider.views import RevokeTokenView, TokenView

from api.views import courses, planner, quota, roster, sessions, templates, usage, webhooks
from api.views.oauth import ClientIntrospectTokenView

app_name = "api"

# Swagger UI draws its icons as data: SVG images; everything else on the page is the portal's own
# (static files from drf-spectacular-sidecar, the init script from its own URL: no inline script).
docs = csp_update({"img-src": ["data:"]})(
    SpectacularSwaggerSplitView.as_view(url_name="api:schema", template_name="api/swagger_ui.html")
)

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # OAuth 2.0 client credentials (api.oauth): a form POST, not part of the REST schema.
    path("oauth/token/", TokenView.as_view(), name="oauth-token"),
    # RFC 7662 and RFC 7009 for those tokens, each client for its own tokens only (api.views.oauth).
    path("oauth/introspect/", ClientIntrospectTokenView.as_view(), name="oauth-introspect"),
    path("oauth/revoke/", RevokeTokenView.as_view(), name="oauth-revoke"),
    path("docs/", docs, name="docs"),
    path("courses/", courses.CourseList.as_view(), name="courses"),
    path("courses/<str:course_id>/", courses.CourseDetail.as_view(), name="course"),
    path("courses/<str:course_id>/quota/", quota.CourseQuotaView.as_view(), name="course-quota"),
    path("courses/<str:course_id>/templates/", templates.CourseTemplates.as_view(), name="course-templates"),
    path(
        "courses/<str:course_id>/templates/<str:template>/",
        templates.CourseTemplate.as_view(),
        name="course-template",
    ),
    path("courses/<str:course_id>/roster/", roster.CourseRoster.as_view(), name="course-roster"),
    path("courses/<str:course_id>/usage/", usage.CourseUsage.as_view(), name="course-usage"),
    path("courses/<str:course_id>/planner/", planner.CoursePlanner.as_view(), name="course-planner"),
    path("courses/<str:course_id>/planner/what-if/", planner.CourseWhatIf.as_view(), name="course-what-if"),
    path("templates/", templates.Catalogue.as_view(), name="templates"),
    path("sessions/", sessions.SessionList.as_view(), name="sessions"),
    path("sessions/<str:session_id>/", sessions.SessionDetail.as_view(), name="session"),
    path("sessions/<str:session_id>/stop/", sessions.SessionStop.as_view(), name="session-stop"),
    path("sessions/<str:session_id>/progress", sessions.SessionProgress.as_view(), name="session-progress"),
    path("webhooks/", webhooks.WebhookList.as_view(), name="webhooks"),
    path("webhooks/<str:webhook_id>/", webhooks.WebhookDetail.as_view(), name="webhook"),
    path("webhooks/<str:webhook_id>/secret/", webhooks.WebhookSecret.as_view(), name="webhook-secret"),
    path("webhooks/<str:webhook_id>/deliveries/", webhooks.WebhookDeliveries.as_view(), name="webhook-deliveries"),
    path(
        "webhooks/<str:webhook_id>/deliveries/<str:delivery_id>/redeliver/",
        webhooks.DeliveryRedeliver.as_view(),
        name="webhook-redeliver",
    ),
]
