from django.apps import AppConfig


class LabsConfig(AppConfig):
    name = "labs"
    verbose_name = "Labs"
    default_auto_field = "django.db.models.BigAutoField"
