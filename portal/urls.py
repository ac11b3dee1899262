from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from labs.metrics import metrics

urlpatterns = [
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", include("labs.urls")),
]
