"""One ASGI application for HTTP (Django) and websockets (Channels)."""

import gc
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from portal.handlers import SyncChainASGIHandler, pool_slots  # noqa: E402  (needs Django set up first)

# At most as many requests in their threads as the database pool has connections (portal/handlers.py).
django_asgi_app = SyncChainASGIHandler(slots=pool_slots())

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from labs.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# Everything built so far (Django, the URLconf, the models, the libraries) lives as long as the
# process: out of the cyclic collector's sight, a full collection no longer walks it on every
# request's garbage (as Instagram does for Django; docs/framework-overrides.md, "The ASGI handler").
gc.freeze()
