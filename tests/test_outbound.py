"""Calls to other servers (labs.outbound) connect to the address they checked: the name is resolved
once, by the resolver the settings name, and the connection goes to that address with the name
kept for the Host header, TLS SNI and the certificate check. Real servers on 127.0.0.1, over
plain HTTP and over TLS with a certificate for a name."""

from __future__ import annotations

import datetime
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.core.exceptions import ImproperlyConfigured

from labs.outbound import AddressRefused, http_session

# A public address (example.com's) where nothing answers the tests' ports: what a rebinding
# attacker's name first resolves to, to pass the check.
PUBLIC = "93.184.215.14"


@dataclass
class Server:
    port: int = 0
    seen: list[dict] = field(default_factory=list)
    names: list[str | None] = field(default_factory=list)  # TLS SNI of each handshake


def _serve(address: str, context: ssl.SSLContext | None = None) -> Iterator[Server]:
    server = Server()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            server.seen.append({"path": self.path, "host": self.headers["Host"]})
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    httpd = ThreadingHTTPServer((address, 0), Handler)
    if context is not None:
        context.sni_callback = lambda sock, name, ctx: server.names.append(name)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    server.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield server
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def plain_server() -> Iterator[Server]:
    yield from _serve("127.0.0.1")


@pytest.fixture
def tls_server(tmp_path, monkeypatch) -> Iterator[Server]:
    """A TLS server on 127.0.0.1 whose certificate names ``lms.test`` only, from a CA the client trusts."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lms.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("lms.test")]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "cert.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    # The environment's trust store, as a deployment adds its own CA: not the code under test.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "ca.pem"))
    yield from _serve("127.0.0.1", context)


def get(url: str) -> requests.Response:
    with http_session(timeout=2, user_agent="test") as session:
        return session.get(url)


def test_a_request_connects_to_the_address_resolved_once_with_its_name_for_host_sni_and_certificate(dns, tls_server):
    # A second resolution would get 127.0.0.2, where nothing listens.
    dns.rebind("lms.test", "127.0.0.1", "127.0.0.2")

    response = get(f"https://lms.test:{tls_server.port}/keys")

    assert response.status_code == 200 and response.text == "ok"
    assert dns.asked == ["lms.test"]
    assert tls_server.seen == [{"path": "/keys", "host": f"lms.test:{tls_server.port}"}]
    assert tls_server.names == ["lms.test"]


def test_a_certificate_for_another_name_is_still_refused(dns, tls_server):
    dns.answer("impostor.test", "127.0.0.1")

    with pytest.raises(requests.exceptions.SSLError):
        get(f"https://impostor.test:{tls_server.port}/keys")

    assert tls_server.seen == []


def test_a_name_that_rebinds_to_a_local_address_after_the_check_is_never_connected_to(dns, plain_server, settings):
    settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    dns.rebind("lms.test", PUBLIC, "127.0.0.1")

    with pytest.raises(requests.ConnectionError):
        get(f"http://lms.test:{plain_server.port}/keys")

    assert dns.asked == ["lms.test"]
    assert plain_server.seen == []


@pytest.mark.parametrize(
    "answers",
    [
        ["127.0.0.1"],
        [PUBLIC, "10.0.0.5"],  # every answer is checked, not only the one connected to
        ["169.254.169.254"],  # a cloud's metadata service
        ["100.64.0.1"],  # shared address space (carrier-grade NAT)
        ["::ffff:127.0.0.1"],
        ["64:ff9b::7f00:1"],  # NAT64 of 127.0.0.1
        ["fd00::1"],
    ],
)
def test_a_name_with_a_local_or_private_address_is_refused_unless_allowed(dns, plain_server, settings, answers):
    settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    dns.answer("lms.test", *answers)

    with pytest.raises(AddressRefused, match="a local or private address"):
        get(f"http://lms.test:{plain_server.port}/keys")

    assert plain_server.seen == []


def test_an_address_written_in_the_url_is_checked_without_asking_the_dns(dns, plain_server, settings):
    settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    with pytest.raises(AddressRefused, match="127.0.0.1 is 127.0.0.1"):
        get(f"http://127.0.0.1:{plain_server.port}/keys")
    settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = True
    assert get(f"http://127.0.0.1:{plain_server.port}/keys").status_code == 200
    assert dns.asked == [] and len(plain_server.seen) == 1


def test_plain_http_is_refused_unless_allowed(dns, plain_server, settings):
    settings.OUTBOUND_ALLOW_HTTP = False
    dns.answer("lms.test", "127.0.0.1")

    with pytest.raises(AddressRefused, match="plain http"):
        get(f"http://lms.test:{plain_server.port}/keys")

    assert plain_server.seen == []


def test_a_name_that_does_not_resolve_is_a_connection_error_naming_it(dns):
    with pytest.raises(requests.ConnectionError, match="could not resolve nowhere.test"):
        get("https://nowhere.test/keys")


def test_a_resolver_that_cannot_be_imported_stops_the_call_naming_the_setting(settings):
    settings.OUTBOUND_RESOLVER = "tests.dns.no_such_resolver"

    with pytest.raises(ImproperlyConfigured, match="OUTBOUND_RESOLVER"):
        get("https://lms.test/keys")
