from django.urls import path

from lti import dynamic_registration_pages as dynamic
from lti import lab_api, registration_pages, views

app_name = "lti"

urlpatterns = [
    path("lti/jwks/", views.jwks, name="jwks"),
    path("lti/login/", views.oidc_login, name="login"),
    path("lti/launch/", views.launch, name="launch"),
    path("lti/launch/window/", views.handoff, name="handoff"),
    path("lti/deep-link/", views.deep_link_respond, name="deep-link"),
    path("lti/courses/<int:course_id>/roster-sync/", views.roster_sync, name="roster-sync"),
    path("lti/canvas.json", dynamic.canvas_json, name="canvas-json"),
    path("lti/register/<str:token>/", dynamic.register, name="register"),
    path("ops/lti/links/", dynamic.link_create, name="ops-registration-link"),
    path("ops/lti/<int:registration_id>/approve/", dynamic.registration_approve, name="ops-registration-approve"),
    path("ops/lti/<int:registration_id>/reject/", dynamic.registration_reject, name="ops-registration-reject"),
    path("lti/sessions/<uuid:session_id>/score/", lab_api.session_score, name="session-score"),
    path("ops/lti/", registration_pages.registrations, name="ops-registrations"),
    path("ops/lti/<int:registration_id>/", registration_pages.registration_edit, name="ops-registration-edit"),
    path("ops/lti/<int:registration_id>/delete/", registration_pages.registration_delete, name="ops-registration-delete"),
]
