"""What drf-spectacular needs to describe the token authentication and the progress stream."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerFieldExtension


class InstitutionTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.InstitutionTokenAuthentication"
    name = "institutionToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An institution API token (/ops/tokens/ or `manage.py api_token create`).",
        }


class InstitutionOAuthScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.InstitutionOAuth2Authentication"
    name = "oauth2ClientCredentials"

    def get_security_definition(self, auto_schema):
        from api.scopes import SCOPES

        return {
            "type": "oauth2",
            "flows": {
                "clientCredentials": {
                    "tokenUrl": "/api/v1/oauth/token/",
                    "scopes": {name: str(label) for name, label in SCOPES.items()},
                }
            },
        }


class JSONTextFieldExtension(OpenApiSerializerFieldExtension):
    """A server-sent event's ``data``: a string holding JSON of a schema of its own (OpenAPI 3.1)."""

    target_class = "api.serializers.JSONTextField"

    def map_serializer_field(self, auto_schema, direction):
        return {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": auto_schema.resolve_serializer(self.target.serializer, direction).ref,
        }
