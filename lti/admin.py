from django.contrib import admin

from lti.models import Deployment, Registration, ToolKey


class DeploymentInline(admin.TabularInline):
    model = Deployment
    extra = 1


@admin.register(Registration)
class RegistrationAdmin(admin.ModelAdmin):
    list_display = ["name", "institution", "issuer", "client_id", "state"]
    list_filter = ["institution", "state"]
    inlines = [DeploymentInline]


@admin.register(ToolKey)
class ToolKeyAdmin(admin.ModelAdmin):
    # The private key is never shown.
    list_display = ["kid", "created_at", "retired_at"]
    fields = ["kid", "created_at", "retired_at"]
    readonly_fields = ["kid", "created_at", "retired_at"]

    def has_add_permission(self, request) -> bool:
        return False
