"""What the tool tells an LMS about itself, built from the portal's public URLs: the client
registration of LTI Dynamic Registration 1.0 and Canvas's LTI 1.3 developer-key JSON.

Pure functions of ``ToolUrls``: the views pass the URLs of the host the request came to.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

TOOL_NAME = "NPU Lab Portal"
TOOL_DESCRIPTION = "Lab sessions on fractional Huawei Ascend NPUs: JupyterLab and vLLM, launched from the LMS course."
TOOL_CONFIGURATION_CLAIM = "https://purl.imsglobal.org/spec/lti-tool-configuration"
# Assignment and Grade Services (line items the tool manages, scores) and Names and Role
# Provisioning Services (the course roster): what lti.services uses.
SCOPES = [
    "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
    "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem.readonly",
    "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly",
    "https://purl.imsglobal.org/spec/lti-ags/scope/score",
    "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly",
]
# The id_token claims the tool reads: the account's name and e-mail follow the LMS.
CLAIMS = ["iss", "sub", "name", "given_name", "family_name", "email"]


@dataclass(frozen=True)
class ToolUrls:
    """The tool's absolute URLs, as an LMS must reach them."""

    login: str
    launch: str
    jwks: str

    @property
    def domain(self) -> str:
        return urlsplit(self.launch).netloc


def client_registration(urls: ToolUrls, *, scopes_supported: list[str] | None = None) -> dict:
    """The body of the Dynamic Registration request (LTI DR 1.0 §3.5.2, OpenID Connect client
    metadata with the LTI tool configuration claim). ``scopes_supported``, the platform's list
    when it gave one, narrows the scopes asked for to those it offers."""
    scopes = [scope for scope in SCOPES if scopes_supported is None or scope in scopes_supported]
    return {
        "application_type": "web",
        "response_types": ["id_token"],
        "grant_types": ["implicit", "client_credentials"],
        "initiate_login_uri": urls.login,
        "redirect_uris": [urls.launch],
        "client_name": TOOL_NAME,
        "jwks_uri": urls.jwks,
        "token_endpoint_auth_method": "private_key_jwt",
        "scope": " ".join(scopes),
        TOOL_CONFIGURATION_CLAIM: {
            "domain": urls.domain,
            "description": TOOL_DESCRIPTION,
            "target_link_uri": urls.launch,
            "claims": CLAIMS,
            "messages": [
                {
                    "type": "LtiDeepLinkingRequest",
                    "target_link_uri": urls.launch,
                    "label": TOOL_NAME,
                    "placements": ["ContentArea", "link_selection", "assignment_selection"],
                    "supported_types": ["ltiResourceLink"],
                },
                {"type": "LtiResourceLinkRequest", "target_link_uri": urls.launch, "label": TOOL_NAME},
            ],
        },
    }


def canvas_configuration(urls: ToolUrls) -> dict:
    """Canvas's LTI 1.3 developer-key JSON ("Enter URL" or "Paste JSON"): deep linking from the
    assignment and module-link pickers, the course navigation link, AGS and NRPS, name and
    e-mail shared (``public``)."""

    def placement(name: str, message_type: str) -> dict:
        return {"placement": name, "message_type": message_type, "target_link_uri": urls.launch, "text": TOOL_NAME}

    return {
        "title": TOOL_NAME,
        "description": TOOL_DESCRIPTION,
        "oidc_initiation_url": urls.login,
        "target_link_uri": urls.launch,
        "public_jwk_url": urls.jwks,
        "scopes": SCOPES,
        "custom_fields": {"canvas_course_id": "$Canvas.course.id"},
        "extensions": [
            {
                "platform": "canvas.instructure.com",
                "domain": urls.domain,
                "privacy_level": "public",
                "settings": {
                    "placements": [
                        placement("link_selection", "LtiDeepLinkingRequest"),
                        placement("assignment_selection", "LtiDeepLinkingRequest"),
                        placement("course_navigation", "LtiResourceLinkRequest"),
                    ]
                },
            }
        ],
    }
