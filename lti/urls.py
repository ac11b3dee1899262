from django.urls import path

from lti import ops, views

app_name = "lti"

urlpatterns = [
    path("lti/jwks/", views.jwks, name="jwks"),
    path("lti/login/", views.oidc_login, name="login"),
    path("lti/launch/", views.launch, name="launch"),
    path("lti/deep-link/", views.deep_link_respond, name="deep-link"),
    path("lti/courses/<int:course_id>/roster-sync/", views.roster_sync, name="roster-sync"),
    path("ops/lti/", ops.registrations, name="ops-registrations"),
    path("ops/lti/<int:registration_id>/", ops.registration_edit, name="ops-registration-edit"),
    path("ops/lti/<int:registration_id>/delete/", ops.registration_delete, name="ops-registration-delete"),
]
