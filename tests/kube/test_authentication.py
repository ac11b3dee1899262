"""The API server authenticates for real: the admin's client certificate works, strangers do not."""

from __future__ import annotations

import json
import ssl
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from labs.devcluster.cluster import DevCluster
from labs.devcluster.pki import CertificateAuthority

pytestmark = pytest.mark.kube


def _get(devcluster: DevCluster, path: str, cert: tuple[Path, Path] | None = None) -> tuple[int, dict]:
    context = ssl.create_default_context(cafile=str(devcluster.ca_file))
    if cert:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    try:
        with urllib.request.urlopen(devcluster.server + path, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_admin_certificate_is_answered(devcluster: DevCluster) -> None:
    pki = devcluster.pki
    status, body = _get(devcluster, "/api/v1/namespaces", (pki / "admin.crt", pki / "admin.key"))

    assert status == 200
    assert {"default", "kube-system", "kube-node-lease"} <= {item["metadata"]["name"] for item in body["items"]}


def test_the_admin_is_in_system_masters(devcluster: DevCluster) -> None:
    review = devcluster.kubectl("auth", "whoami", "-o", "json")

    user = json.loads(review.stdout)["status"]["userInfo"]
    assert user["username"] == "devcluster-admin"
    assert "system:masters" in user["groups"]


def test_anonymous_requests_are_refused(devcluster: DevCluster) -> None:
    status, body = _get(devcluster, "/api/v1/namespaces")

    assert status == 403
    assert 'User "system:anonymous" cannot list resource "namespaces"' in body["message"]


def test_anonymous_requests_see_only_health_and_version(devcluster: DevCluster) -> None:
    status, body = _get(devcluster, "/version")

    assert status == 200
    assert body["gitVersion"] == devcluster.release.kubernetes


def test_a_certificate_from_another_ca_is_refused(devcluster: DevCluster) -> None:
    with tempfile.TemporaryDirectory() as other:
        stranger = CertificateAuthority(Path(other), name="another-ca").issue(
            "admin", "devcluster-admin", organizations=("system:masters",), client=True
        )
        status, body = _get(devcluster, "/api/v1/namespaces", (stranger.cert, stranger.key))

    assert status == 401
    assert body["reason"] == "Unauthorized"
