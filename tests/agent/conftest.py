from __future__ import annotations

import pytest

from nodeagent.cards.simulated import SimulatedDriver
from tests.agent.helpers import NODE, running


@pytest.fixture
def simulated():
    return SimulatedDriver(node_name=NODE)


@pytest.fixture
def agent(simulated):
    """A running agent on the simulated driver."""
    with running(simulated) as server:
        yield server
