"""The portal's settings with one URL more, for ``bench.asgi_servers``: ``/bench/floor/``, the
trivial view of ``bench.request_cost`` behind the same middleware (the floor every request pays)."""

from portal.settings import *  # noqa: F403

ROOT_URLCONF = "bench.request_cost"
