"""What drf-spectacular needs to describe the token authentication."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class InstitutionTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.InstitutionTokenAuthentication"
    name = "institutionToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An institution API token (/ops/tokens/ or `manage.py api_token create`).",
        }
