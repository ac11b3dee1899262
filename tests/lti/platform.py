"""A real LTI 1.3 platform (a tiny LMS) for the tests, served over HTTP on a free port.

It signs id_tokens with its own RSA key (RS256, PyJWT), publishes its JWKS, answers the OIDC
authentication request with an id_token for the launch the test asked for, issues OAuth2 access
tokens only for a client assertion that verifies against the tool's published JWKS, serves the
course membership (NRPS), keeps a line item container the tool may list and add to, and records
every score posted to its line items with its progress fields (AGS). Deep-linking
responses posted back are verified against the tool's JWKS too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from html import escape as html_escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import jwt
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
LEARNER = [MEMBERSHIP + "Learner"]
INSTRUCTOR = [MEMBERSHIP + "Instructor"]
TEACHING_ASSISTANT = [MEMBERSHIP + "Instructor", "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant"]
AGS_SCOPES = [
    "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
    "https://purl.imsglobal.org/spec/lti-ags/scope/score",
]


def new_rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def private_pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


@dataclass
class Platform:
    tool_jwks_url: str = ""
    client_id: str = "portal-client"
    deployment_id: str = "deployment-1"
    key: object = field(default_factory=new_rsa_key)
    kid: str = "platform-key-1"
    context: dict = field(default_factory=lambda: {"id": "ctx-101", "label": "NPU101", "title": "NPU programming"})
    members: list[dict] = field(default_factory=list)
    scores: list[dict] = field(default_factory=list)
    # The line items of the context's container (AGS): those the tool created, in order.
    lineitems: list[dict] = field(default_factory=list)
    # Answer a line item creation only after this many seconds (two workers asking at once).
    lineitems_delay: float = 0.0
    deep_link_responses: list[dict] = field(default_factory=list)
    tokens_issued: list[str] = field(default_factory=list)
    # What the next OIDC authentication request answers with: claims merged over the defaults,
    # and optionally a different signing key (a bad signature).
    next_launch: dict = field(default_factory=dict)
    next_signing_key: object = None
    # LTI 1.1 migration (IMS "LTI 1.1 Migration Guide"): the consumer key and shared secret the
    # platform used under LTI 1.1. A launch whose spec has "lti1p1_user_id" carries the lti1p1
    # claim, signed with ``lti11_signing_secret`` when set (a forgery), else with the shared secret.
    lti11_consumer_key: str = "legacy-key"
    lti11_secret: str = "legacy-secret"
    lti11_signing_secret: str | None = None
    # Platform storage (IMS "LTI Client Side postMessages"): the frame the tool is to postMessage,
    # sent as lti_storage_target in the login and in the authentication response.
    storage_target: str = ""
    # The course page (GET /course?launch=<the tool's login URL>) frames the tool and answers its
    # lti.put_data / lti.get_data messages from a store kept per origin, as an LMS does; with
    # ``storage_forged`` it gives back another value for the state's key.
    storage_forged: bool = False
    # Answer score posts with this HTTP status instead of recording them (a platform outage).
    scores_status: int = 200
    # Answer score posts only after this many seconds (a slow platform, while another worker tries).
    scores_delay: float = 0.0
    # The membership service answers only after this many seconds (a platform that hangs).
    memberships_delay: float = 0.0
    # More endpoints, by (method, path): a function of the request handler and the parsed URL
    # that answers with ``handler._send`` (tests/lti/registrar.py serves Dynamic Registration).
    routes: dict = field(default_factory=dict)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    # --- serving ---
    def start(self) -> Platform:
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, body: object, content_type: str = "application/json") -> None:
                data = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _form(self) -> dict[str, str]:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                return {k: v[0] for k, v in parse_qs(raw).items()}

            def _authorised(self) -> bool:
                header = self.headers.get("Authorization", "")
                return header.startswith("Bearer ") and header[7:] in platform.tokens_issued

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if ("GET", parts.path) in platform.routes:
                    return platform.routes["GET", parts.path](self, parts)
                if parts.path == "/jwks":
                    return self._send(200, platform.jwks())
                if parts.path == "/auth":
                    params = {k: v[0] for k, v in parse_qs(parts.query).items()}
                    answer = platform.authenticate(params)
                    if "text/html" in self.headers.get("Accept", ""):
                        # A browser: the OIDC form_post response, submitted by script as an LMS does.
                        page = (
                            f'<form method="post" action="{answer["action"]}">'
                            f'<input type="hidden" name="id_token" value="{answer["id_token"]}">'
                            f'<input type="hidden" name="state" value="{answer["state"]}">'
                            + (
                                f'<input type="hidden" name="lti_storage_target" value="{answer["lti_storage_target"]}">'
                                if "lti_storage_target" in answer
                                else ""
                            )
                            + "</form>"
                            "<script>document.forms[0].submit()</script>"
                        )
                        return self._send(200, page.encode(), "text/html")
                    return self._send(200, answer)
                if parts.path == "/lineitems":
                    if not self._authorised():
                        return self._send(401, {"error": "unauthorised"})
                    return self._send(200, platform.lineitems, "application/vnd.ims.lis.v2.lineitemcontainer+json")
                if parts.path == "/course":
                    launch = parse_qs(parts.query)["launch"][0]
                    return self._send(200, platform.course_page(launch).encode(), "text/html")
                if parts.path == "/memberships":
                    time.sleep(platform.memberships_delay)
                    if not self._authorised():
                        return self._send(401, {"error": "unauthorised"})
                    body = {"id": platform.url + "/memberships", "context": platform.context, "members": platform.members}
                    return self._send(200, body, "application/vnd.ims.lti-nrps.v2.membershipcontainer+json")
                return self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                parts = urlsplit(self.path)
                if ("POST", parts.path) in platform.routes:
                    return platform.routes["POST", parts.path](self, parts)
                if parts.path == "/token":
                    form = self._form()
                    try:
                        platform.verify_tool_jwt(form.get("client_assertion", ""), audience=platform.url + "/token")
                    except jwt.PyJWTError as exc:
                        return self._send(401, {"error": "invalid_client", "detail": str(exc)})
                    token = uuid.uuid4().hex
                    platform.tokens_issued.append(token)
                    return self._send(200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600})
                if parts.path == "/lineitems":
                    if not self._authorised():
                        return self._send(401, {"error": "unauthorised"})
                    length = int(self.headers.get("Content-Length") or 0)
                    item = json.loads(self.rfile.read(length))
                    if self.headers.get("Content-Type") != "application/vnd.ims.lis.v2.lineitem+json":
                        return self._send(415, {"error": "a line item is application/vnd.ims.lis.v2.lineitem+json"})
                    if not item.get("label") or not isinstance(item.get("scoreMaximum"), int | float):
                        return self._send(400, {"error": "a line item needs a label and a scoreMaximum"})
                    time.sleep(platform.lineitems_delay)
                    with platform.lock:
                        item["id"] = f"{platform.url}/lineitems/{100 + len(platform.lineitems)}"
                        platform.lineitems.append(item)
                    return self._send(201, item, "application/vnd.ims.lis.v2.lineitem+json")
                if parts.path.startswith("/lineitems/") and parts.path.endswith("/scores"):
                    time.sleep(platform.scores_delay)
                    if not self._authorised():
                        return self._send(401, {"error": "unauthorised"})
                    if platform.scores_status != 200:
                        return self._send(platform.scores_status, {"error": "down", "echo": self.headers["Authorization"]})
                    length = int(self.headers.get("Content-Length") or 0)
                    score = json.loads(self.rfile.read(length))
                    score["_lineitem"] = parts.path[: -len("/scores")]
                    score["_content_type"] = self.headers.get("Content-Type")
                    platform.scores.append(score)
                    return self._send(200, {})
                if parts.path == "/deep-link-return":
                    claims = platform.verify_tool_jwt(self._form()["JWT"], audience=platform.url)
                    platform.deep_link_responses.append(claims)
                    return self._send(200, b"<p>added</p>", "text/html")
                return self._send(404, {"error": "not found"})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- the platform's side of the protocol ---
    @property
    def issuer(self) -> str:
        return self.url

    def jwks(self) -> dict:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def login_params(self, **extra: str) -> dict[str, str]:
        """What the LMS sends to the tool's login URL (third-party initiated login)."""
        return {
            "iss": self.issuer,
            "login_hint": "hint-123",
            "target_link_uri": extra.pop("target_link_uri", ""),
            "lti_message_hint": "msg-hint",
            "client_id": self.client_id,
            "lti_deployment_id": self.deployment_id,
            **({"lti_storage_target": self.storage_target} if self.storage_target else {}),
            **extra,
        }

    def default_claims(self, *, nonce: str, sub: str, roles: list[str]) -> dict:
        now = int(time.time())
        return {
            "iss": self.issuer,
            "aud": self.client_id,
            "sub": sub,
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
            "given_name": "Ada",
            "family_name": "Lovelace",
            "email": f"{sub}@lms.example",
            CLAIM + "version": "1.3.0",
            CLAIM + "message_type": "LtiResourceLinkRequest",
            CLAIM + "deployment_id": self.deployment_id,
            CLAIM + "target_link_uri": "",
            CLAIM + "roles": roles,
            CLAIM + "context": self.context,
            CLAIM + "resource_link": {"id": "link-1", "title": "Lab"},
            "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice": {
                "context_memberships_url": self.url + "/memberships",
                "service_versions": ["2.0"],
            },
        }

    def authenticate(self, params: dict[str, str]) -> dict:
        """The OIDC authentication response: the id_token and state to post to redirect_uri."""
        spec = dict(self.next_launch)
        sub = spec.pop("sub", "student-1")
        roles = spec.pop("roles", LEARNER)
        lti11_user_id = spec.pop("lti1p1_user_id", None)
        claims = self.default_claims(nonce=params["nonce"], sub=sub, roles=roles)
        claims[CLAIM + "target_link_uri"] = params["redirect_uri"]
        for name, value in spec.items():
            if value is None:
                claims.pop(name, None)
            else:
                claims[name] = value
        if lti11_user_id is not None:
            claims[CLAIM + "lti1p1"] = {
                "user_id": lti11_user_id,
                "oauth_consumer_key": self.lti11_consumer_key,
                "oauth_consumer_key_sign": self.lti11_sign(claims),
            }
        key = self.next_signing_key or self.key
        id_token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": self.kid})
        answer = {"action": params["redirect_uri"], "id_token": id_token, "state": params["state"], "params": params}
        if self.storage_target:
            answer["lti_storage_target"] = self.storage_target
        return answer

    def course_page(self, launch: str) -> str:
        """An LMS page that frames the tool's login and answers platform storage messages
        (IMS "LTI Client Side postMessages"): put_data stores, get_data gives back, per origin."""
        forged = "true" if self.storage_forged else "false"
        return (
            "<!doctype html><title>LMS course</title>"
            f'<iframe name="tool" title="tool" src="{html_escape(launch)}" width="900" height="600"></iframe>'
            "<script>"
            f"var forged = {forged}; var store = {{}}; window.__storage = [];"
            "window.addEventListener('message', function (event) {"
            "  var m = event.data; if (!m || typeof m !== 'object' || !m.subject) return;"
            "  window.__storage.push(m.subject + ' ' + m.key);"
            "  var reply = {subject: m.subject + '.response', message_id: m.message_id, key: m.key};"
            "  var slot = event.origin + ' ' + m.key;"
            "  if (m.subject === 'lti.put_data') { store[slot] = m.value; reply.value = m.value; }"
            "  else if (m.subject === 'lti.get_data') {"
            "    reply.value = forged && m.key.indexOf('lti1p3-state-') === 0 ? 'forged-secret' : store[slot]; }"
            "  else { reply.error = {code: 'unsupported_subject', message: 'not supported'}; }"
            "  event.source.postMessage(reply, event.origin);"
            "});"
            "</script>"
        )

    def lti11_sign(self, claims: dict) -> str:
        """oauth_consumer_key_sign as the LTI 1.1 Migration Guide defines it: base64(HMAC-SHA256(secret,
        oauth_consumer_key & deployment_id & iss & client_id & exp & nonce))."""
        parts = [self.lti11_consumer_key, claims[CLAIM + "deployment_id"], claims["iss"], claims["aud"]]
        parts += [claims["exp"], claims["nonce"]]
        secret = self.lti11_signing_secret if self.lti11_signing_secret is not None else self.lti11_secret
        digest = hmac.new(secret.encode(), "&".join(str(part) for part in parts).encode(), hashlib.sha256).digest()
        return base64.b64encode(digest).decode()

    def verify_tool_jwt(self, token: str, *, audience: str) -> dict:
        """Verify a JWT the tool signed, with the key its JWKS publishes under the token's kid."""
        kid = jwt.get_unverified_header(token)["kid"]
        keys = requests.get(self.tool_jwks_url, timeout=10).json()["keys"]
        jwk = next(k for k in keys if k["kid"] == kid)
        public_key = RSAAlgorithm.from_jwk(json.dumps(jwk))
        return jwt.decode(token, public_key, algorithms=["RS256"], audience=audience, issuer=self.client_id)

    def deep_link_claims(self) -> dict:
        return {
            CLAIM + "message_type": "LtiDeepLinkingRequest",
            CLAIM + "resource_link": None,
            "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings": {
                "deep_link_return_url": self.url + "/deep-link-return",
                "accept_types": ["ltiResourceLink"],
                "accept_presentation_document_targets": ["iframe", "window"],
                "data": "opaque-platform-data",
            },
        }
