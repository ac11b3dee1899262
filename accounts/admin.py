from django.contrib import admin

from accounts.models import Preference


@admin.register(Preference)
class PreferenceAdmin(admin.ModelAdmin):
    list_display = ["user", "language", "updated_at"]
    list_filter = ["language"]
    search_fields = ["user__username"]
    list_select_related = ["user"]
    raw_id_fields = ["user"]
