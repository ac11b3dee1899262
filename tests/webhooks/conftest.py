from __future__ import annotations

import pytest

from tests.api.conftest import api, elsewhere, make_token  # noqa: F401 - fixtures
from tests.webhooks.receiver import start_receiver


@pytest.fixture
def receiver():
    receiver, server = start_receiver()
    yield receiver
    server.shutdown()
    server.server_close()
