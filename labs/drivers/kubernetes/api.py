"""The driver's way to the API server: retries, errors and the calls the generated client cannot make.

Transient API failures (HTTP 429/500/502/503/504, connection errors, read timeouts) are retried
by urllib3's ``Retry`` on the client's connection pool, with exponential backoff, except a create
(see ``_Retry``). Anything left is a ``DriverError`` (``DriverRefused`` for a request the API
server finds invalid or forbidden).
"""

from __future__ import annotations

import json
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.util.retry import Retry

from labs.drivers.base import DriverError, DriverRefused

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Answers that say the API server did nothing with the request: priority and fairness turned
# it away (429). Only these are sent again for a create.
NOT_DONE_STATUSES = frozenset({429})


class _Retry(Retry):
    """urllib3's retries, except that a create (POST) is sent again only when the API server
    said it did nothing with it (429).

    A create that timed out or was answered 5xx may have been stored, and a pod's second create
    is charged to the course namespace's ResourceQuota again (admission counts it before the
    name is checked) until the quota controller recounts, minutes later: the class's last
    students would be refused "exceeded quota". The driver looks for the pod instead
    (``KubernetesDriver._create_pod``).
    """

    def _is_method_retryable(self, method: str) -> bool:
        # Read errors (a timeout, a dropped connection) after the request went out: a create
        # may have been done. Connection errors (nothing sent) are retried for every verb.
        return method.upper() != "POST" and super()._is_method_retryable(method)

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if method.upper() == "POST" and status_code in NOT_DONE_STATUSES:
            return status_code in (self.status_forcelist or ())
        return super().is_retry(method, status_code, has_retry_after)


REFUSED_STATUSES = frozenset({400, 403, 422})
# Connections kept open to the API server: enough for the controller's pool to make its labs'
# parts at once without opening (a TLS handshake each) and dropping connections.
CONNECTIONS = 48
# The API server answers a list with only each object's metadata when asked for this.
PARTIAL_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def api_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        body = None
    message = body.get("message") if isinstance(body, dict) else None
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


def client_configuration(
    api_url: str, token: str, kubeconfig: str, verify_ssl: bool, ca_cert: str, retries: int
) -> client.Configuration:
    configuration = client.Configuration()
    if api_url:
        configuration.host = api_url.rstrip("/")
        if token:
            # The whole header value under the old key: client 36 looks the prefix up under
            # "BearerToken" only, so a prefix set apart sent the bare token (anonymous to the API server).
            configuration.api_key = {"authorization": f"Bearer {token}"}
        configuration.verify_ssl = verify_ssl
        if ca_cert:
            configuration.ssl_ca_cert = ca_cert
    else:
        try:
            if kubeconfig:
                config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
            else:
                try:
                    config.load_incluster_config(client_configuration=configuration)
                except ConfigException:
                    config.load_kube_config(client_configuration=configuration)
        except (ConfigException, OSError) as exc:
            raise ValueError(f"no Kubernetes API: set api_url, run in a cluster or provide a kubeconfig ({exc})") from exc
    # Retries live on the connection pool, so every call of the client gets them.
    configuration.connection_pool_maxsize = CONNECTIONS
    configuration.retries = _Retry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        other=0,
        backoff_factor=0.2,
        backoff_max=5,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=None,  # every verb but a create's second sending (see _Retry)
        raise_on_status=False,  # the last 5xx reaches the client as an ApiException
        respect_retry_after_header=True,
    )
    return configuration


class KubernetesApi:
    """Calls to the API server, each with the driver's ``request_timeout_seconds``."""

    request_timeout_seconds: float

    def _call(self, what: str, method: Any, *args: Any, passthrough: tuple[int, ...] = (), **kwargs: Any) -> Any:
        """Call the API; statuses in ``passthrough`` re-raise ``ApiException``, all else becomes ``DriverError``."""
        try:
            return method(*args, _request_timeout=self.request_timeout_seconds, **kwargs)
        except ApiException as exc:
            if exc.status in passthrough:
                raise
            # A request the API server finds invalid or forbidden fails the same way next time.
            error = DriverRefused if exc.status in REFUSED_STATUSES else DriverError
            raise error(f"The cluster refused {what}: {api_message(exc)}.") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise DriverError(f"The cluster API did not answer while {what}; try again shortly.") from exc

    def _create(self, what: str, method: Any, namespace: str | None, body: dict) -> bool:
        """Create an object; ``False`` if it already existed."""
        args = (namespace, body) if namespace is not None else (body,)
        try:
            # Not turned into model objects (that costs the client more than the request), but
            # read to its end: only then does the connection go back to the pool for the next call.
            self._call(what, method, *args, passthrough=(409,), _preload_content=False).data  # noqa: B018
        except ApiException:
            return False
        return True

    def _delete(self, what: str, method: Any, name: str, namespace: str) -> None:
        try:
            self._call(f"deleting {what}", method, name, namespace, passthrough=(404,), _preload_content=False).data  # noqa: B018
        except ApiException:
            pass  # already gone


class PodMetadataApi:
    """The one call the generated client cannot make: a pod list answered as metadata only.

    ``CoreV1Api`` sets the ``Accept`` header itself, so it cannot ask for a
    ``PartialObjectMetadataList``; this asks the same endpoint (``GET /api/v1/pods``, the
    ``list`` verb on pods, nothing more) with that header. The answer is left unread
    (``_preload_content=False``): the caller reads its JSON.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client

    def list_pod_for_all_namespaces(self, *, field_selector: str, _request_timeout: float) -> Any:
        return self.api_client.call_api(
            "/api/v1/pods",
            "GET",
            query_params=[("fieldSelector", field_selector)],
            header_params={"Accept": PARTIAL_METADATA_LIST},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=_request_timeout,
        )


def list_items(answer: Any, what: str) -> list[Any]:
    """The ``items`` of a list read as plain JSON (an empty list comes with ``"items": null``);
    ``DriverError`` "The cluster API answered <what>." when it is not a list."""
    try:
        items = json.loads(answer.data).get("items") or []
    except (ValueError, AttributeError) as exc:
        raise DriverError(f"The cluster API answered {what}.") from exc
    if not isinstance(items, list):
        raise DriverError(f"The cluster API answered {what}.")
    return items
