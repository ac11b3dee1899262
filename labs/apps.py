from django.apps import AppConfig
from django.conf import settings


class LabsConfig(AppConfig):
    name = "labs"
    verbose_name = "Labs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A typo in LAB_PLACEMENT should stop start-up, not the first allocation pass.
        from labs.selectors.capacity import placement_config

        placement_config()
        # Likewise an option the cluster driver does not take, or one of the wrong type; the driver
        # itself, which may need its cluster, is built on first use.
        from labs.drivers import driver_class

        driver_class(settings.LAB_DRIVER)
        # The system check that refuses to start without an encryption key outside the demo.
        from labs import encryption  # noqa: F401
