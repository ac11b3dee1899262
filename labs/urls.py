from django.urls import path

from labs.views import endpoint, instructor, instructor_students, operator, planner, student

app_name = "labs"

urlpatterns = [
    path("", student.home, name="home"),
    path("sessions/launch/", student.session_launch, name="session-launch"),
    path("sessions/<uuid:session_id>/stop/", student.session_stop, name="session-stop"),
    path("sessions/<uuid:session_id>/extend/", student.session_extend, name="session-extend"),
    path("sessions/<uuid:session_id>/keep/", student.session_keep, name="session-keep"),
    path("sessions/<uuid:session_id>/smaller/", student.session_switch_smaller, name="session-smaller"),
    path("sessions/<uuid:session_id>/", student.session_detail, name="session-detail"),
    path("sessions/<uuid:session_id>/selftest", student.session_selftest, name="session-selftest"),
    path("teach/", instructor.console_home, name="console"),
    path("teach/courses/new/", instructor.course_new, name="course-new"),
    path("courses/<int:course_id>/", instructor.course_detail, name="course-detail"),
    path("courses/<int:course_id>/use/", instructor.course_use, name="course-use"),
    path("courses/<int:course_id>/edit/", instructor.course_edit, name="course-edit"),
    path("courses/<int:course_id>/archive/", instructor.course_archive, name="course-archive"),
    path("courses/<int:course_id>/quota/", instructor.course_quota, name="course-quota"),
    path("courses/<int:course_id>/templates/", instructor.course_templates, name="course-templates"),
    path("courses/<int:course_id>/templates/preview/", instructor.template_preview, name="template-preview"),
    path("courses/<int:course_id>/roster/", instructor_students.course_roster, name="course-roster"),
    path("courses/<int:course_id>/roster/import/", instructor_students.roster_import, name="roster-import"),
    path("courses/<int:course_id>/roster/import/done/", instructor_students.roster_import_done, name="roster-import-done"),
    path("courses/<int:course_id>/sessions/stop-all/", instructor.sessions_stop_all, name="sessions-stop-all"),
    path("courses/<int:course_id>/usage/", instructor_students.course_usage_view, name="course-usage"),
from labs.views import endpoint, instructor, instructor_students, operator, planner, student
    path("courses/<int:course_id>/reservations/", instructor_students.course_reservations_view, name="course-reservations"),
    path(
        "courses/<int:course_id>/reservations/<int:reservation_id>/cancel/",
        instructor_students.reservation_cancel,
        name="reservation-cancel",
    ),
    path("ops/", operator.cluster, name="ops"),
    path("ops/cluster.json", operator.cluster_json, name="ops-cluster-json"),
    path("ops/cards/<int:card_id>/", operator.card_detail, name="ops-card"),
    path("ops/cards/<int:card_id>/health/", operator.card_health, name="ops-card-health"),
    path("ops/cards/<int:card_id>/isolation/clear/", operator.card_isolation_clear, name="ops-card-isolation-clear"),
    path("ops/nodes/<int:node_id>/drain/", operator.node_drain, name="ops-node-drain"),
    path("ops/nodes/<int:node_id>/evacuate/", operator.node_evacuate, name="ops-node-evacuate"),
    path("ops/sessions/<uuid:session_id>/stop/", operator.session_stop, name="ops-session-stop"),
    path("ops/usage/", operator.usage_view, name="ops-usage"),
    path("ops/planner/", planner.ops_planner, name="ops-planner"),
    path("ops/tenancy/", operator.tenancy, name="ops-tenancy"),
    path("ops/repairs/", operator.repairs_view, name="ops-repairs"),
    path("ops/audit/", operator.audit_view, name="ops-audit"),
]
