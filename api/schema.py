"""What drf-spectacular needs to describe the token authentication, the progress stream and the
links between operations."""

import re

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


class GridIntegerFieldExtension(OpenApiSerializerFieldExtension):
    """An integer on a grid (quota memory: 128 MiB): ``multipleOf``, beside the range the validators give."""

    target_class = "api.serializers.GridIntegerField"

    def map_serializer_field(self, auto_schema, direction):
        # The range comes from the field's validators, null, default and description from its meta.
        return {"type": "integer", "multipleOf": self.target.grid}


def created_object_links(result, generator, request, public):
    """An OpenAPI link from each 201 to every operation on what it made: the answer's ``id`` is
    their path parameter (POST /courses/ -> GET /courses/{course_id}/, its quota, its roster, ...).
    Clients and Schemathesis' stateful tests follow them. A drf-spectacular postprocessing hook."""
    paths = result["paths"]
    for path, item in paths.items():
        for operation in item.values():
            created = operation["responses"].get("201")
            if created is None:
                continue
            links = {}
            for target_path, target_item in paths.items():
                under = re.match(re.escape(path) + r"\{(\w+)\}/", target_path)
                if under is None:
                    continue
                for target in target_item.values():
                    links[target["operationId"]] = {
                        "operationId": target["operationId"],
                        "parameters": {under[1]: "$response.body#/id"},
                    }
            if links:
                created["links"] = links
    return result
