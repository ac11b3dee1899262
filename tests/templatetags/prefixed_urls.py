"""The portal's URLs under /portal/, for tests of URL reversal under another URLconf."""

from django.urls import include, path

urlpatterns = [path("portal/", include("portal.urls"))]
