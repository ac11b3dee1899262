from django.urls import path

from labs import views

app_name = "labs"

urlpatterns = [
    path("", views.home, name="home"),
    path("sessions/launch/", views.session_launch, name="session-launch"),
    path("sessions/<uuid:session_id>/stop/", views.session_stop, name="session-stop"),
    path("sessions/<uuid:session_id>/", views.session_detail, name="session-detail"),
    path("courses/<int:course_id>/", views.course_detail, name="course-detail"),
]
