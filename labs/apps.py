from django.apps import AppConfig


class LabsConfig(AppConfig):
    name = "labs"
    verbose_name = "Labs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A typo in LAB_PLACEMENT should stop start-up, not the first allocation pass.
        from labs.services.allocation import placement_config

        placement_config()
