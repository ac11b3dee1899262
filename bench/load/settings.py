"""What ``bench.load``'s processes run: the portal's settings, the trivial view at ``/bench/floor/``
(``bench.asgi_settings``) and, first in the chain, the request-thread CPU header (``bench.load.cpu``)."""

from bench.asgi_settings import *  # noqa: F403
from bench.asgi_settings import MIDDLEWARE

MIDDLEWARE = ["bench.load.cpu.RequestThreadCpu", *MIDDLEWARE]
