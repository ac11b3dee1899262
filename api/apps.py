from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "LMS API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from api import schema  # noqa: F401 - registers the token scheme with drf-spectacular
