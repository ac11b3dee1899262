from django.urls import path

from labs import console, ops, views

app_name = "labs"

urlpatterns = [
    path("", views.home, name="home"),
    path("sessions/launch/", views.session_launch, name="session-launch"),
    path("sessions/<uuid:session_id>/stop/", views.session_stop, name="session-stop"),
    path("sessions/<uuid:session_id>/extend/", views.session_extend, name="session-extend"),
    path("sessions/<uuid:session_id>/keep/", views.session_keep, name="session-keep"),
    path("sessions/<uuid:session_id>/", views.session_detail, name="session-detail"),
    path("sessions/<uuid:session_id>/selftest", views.session_selftest, name="session-selftest"),
    path("teach/", console.console_home, name="console"),
    path("teach/courses/new/", console.course_new, name="course-new"),
    path("courses/<int:course_id>/", console.course_detail, name="course-detail"),
    path("courses/<int:course_id>/use/", console.course_use, name="course-use"),
    path("courses/<int:course_id>/edit/", console.course_edit, name="course-edit"),
    path("courses/<int:course_id>/archive/", console.course_archive, name="course-archive"),
    path("courses/<int:course_id>/quota/", console.course_quota, name="course-quota"),
    path("courses/<int:course_id>/templates/", console.course_templates, name="course-templates"),
    path("courses/<int:course_id>/templates/preview/", console.template_preview, name="template-preview"),
    path("courses/<int:course_id>/roster/", console.course_roster, name="course-roster"),
    path("courses/<int:course_id>/roster/import/", console.roster_import, name="roster-import"),
    path("courses/<int:course_id>/sessions/stop-all/", console.sessions_stop_all, name="sessions-stop-all"),
    path("courses/<int:course_id>/usage/", console.course_usage_view, name="course-usage"),
    path("courses/<int:course_id>/reservations/", console.course_reservations_view, name="course-reservations"),
    path(
        "courses/<int:course_id>/reservations/<int:reservation_id>/cancel/",
        console.reservation_cancel,
        name="reservation-cancel",
    ),
    path("ops/", ops.cluster, name="ops"),
    path("ops/cluster.json", ops.cluster_json, name="ops-cluster-json"),
    path("ops/cards/<int:card_id>/", ops.card_detail, name="ops-card"),
    path("ops/cards/<int:card_id>/health/", ops.card_health, name="ops-card-health"),
    path("ops/cards/<int:card_id>/isolation/clear/", ops.card_isolation_clear, name="ops-card-isolation-clear"),
    path("ops/nodes/<int:node_id>/drain/", ops.node_drain, name="ops-node-drain"),
    path("ops/nodes/<int:node_id>/evacuate/", ops.node_evacuate, name="ops-node-evacuate"),
    path("ops/sessions/<uuid:session_id>/stop/", ops.session_stop, name="ops-session-stop"),
    path("ops/usage/", ops.usage_view, name="ops-usage"),
    path("ops/tenancy/", ops.tenancy, name="ops-tenancy"),
    path("ops/repairs/", ops.repairs_view, name="ops-repairs"),
    path("ops/audit/", ops.audit_view, name="ops-audit"),
]
