"""LTI Dynamic Registration 1.0, the platform's side, on the test platform (tests/lti/platform.py):
its OpenID configuration and a registration endpoint that accepts only the registration token it
handed out, records each client registration posted to it and answers with a client ID and a
deployment ID (or with the error a test asks for)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlencode

from tests.lti.platform import Platform

TOOL_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-tool-configuration"
PLATFORM_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-platform-configuration"


@dataclass
class Registrar:
    platform: Platform
    registration_token: str = "registration-token-7"
    client_id: str = "dynamic-client-1"
    deployment_id: str = "dynamic-deployment-1"
    # The issuer the configuration names (None: the platform's own).
    issuer: str | None = None
    # Answer registrations with this status and body instead of registering (a refusal).
    error_status: int = 0
    error_body: dict = field(default_factory=dict)
    configurations_served: int = 0
    received: list[dict] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)

    def install(self) -> Registrar:
        self.platform.routes["GET", "/.well-known/openid-configuration"] = self._configuration
        self.platform.routes["POST", "/register"] = self._register
        # Launches after the registration use what it handed out.
        self.platform.client_id = self.client_id
        self.platform.deployment_id = self.deployment_id
        return self

    @property
    def openid_configuration_url(self) -> str:
        return self.platform.url + "/.well-known/openid-configuration"

    def query(self, **overrides: str) -> str:
        """The query string an LMS puts on the tool's registration URL."""
        params = {"openid_configuration": self.openid_configuration_url, "registration_token": self.registration_token}
        return "?" + urlencode({**params, **overrides})

    def configuration(self) -> dict:
        url = self.platform.url
        return {
            "issuer": self.issuer or self.platform.issuer,
            "authorization_endpoint": url + "/auth",
            "token_endpoint": url + "/token",
            "jwks_uri": url + "/jwks",
            "registration_endpoint": url + "/register",
            "scopes_supported": [
                "openid",
                "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
                "https://purl.imsglobal.org/spec/lti-ags/scope/score",
                "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly",
            ],
            "response_types_supported": ["id_token"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "claims_supported": ["sub", "iss", "name", "given_name", "family_name", "email"],
            PLATFORM_CONFIGURATION: {
                "product_family_code": "moodle",
                "version": "4.5",
                "messages_supported": [{"type": "LtiResourceLinkRequest"}, {"type": "LtiDeepLinkingRequest"}],
            },
        }

    def _configuration(self, handler, parts) -> None:
        self.configurations_served += 1
        handler._send(200, self.configuration())

    def _register(self, handler, parts) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length))
        authorization = handler.headers.get("Authorization", "")
        self.authorizations.append(authorization)
        if authorization != f"Bearer {self.registration_token}":
            return handler._send(401, {"error": "invalid_token", "error_description": "unknown registration token"})
        if self.error_status:
            return handler._send(self.error_status, self.error_body)
        self.received.append(body)
        answer = {
            **body,
            "client_id": self.client_id,
            TOOL_CONFIGURATION: {**body[TOOL_CONFIGURATION], "deployment_id": self.deployment_id},
        }
        handler._send(200, answer)
