"""One ASGI application for HTTP (Django) and websockets (Channels)."""

import os

import django

from portal.collector import collector_tuned
from portal.daphne_requests import daphne_form_parse_skipped

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from portal.handlers import SyncChainASGIHandler, pool_slots  # noqa: E402  (needs Django set up first)

# At most as many requests in their threads as the database pool has connections (portal/handlers.py).
django_asgi_app = SyncChainASGIHandler(slots=pool_slots())

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from labs import gateway  # noqa: E402
from labs.routing import websocket_urlpatterns  # noqa: E402


class PortalRouter(ProtocolTypeRouter):
    """Channels' router, with the course model endpoint's gateway (``/gateway/``, labs/gateway.py)
    in front of Django's handler: it streams on the event loop, without Django's request cycle."""

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(gateway.PREFIX):
            return await gateway.application(scope, receive, send)
        return await super().__call__(scope, receive, send)


application = PortalRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# Under Daphne, a posted form is parsed once, by Django (portal/daphne_requests.py).
daphne_form_parse_skipped()

# Everything built so far (Django, the URLconf, the models, the libraries) lives as long as the
# process: out of the cyclic collector's sight, a full collection no longer walks it on every
# request's garbage (portal/collector.py; docs/framework-overrides.md, "The ASGI handler").
collector_tuned()
