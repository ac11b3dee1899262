"""A DNS for the tests, chosen the way production chooses its resolver: ``OUTBOUND_RESOLVER =
"tests.dns.resolve"`` (the ``dns`` fixture sets it). Each name answers what the test scripted,
and can change its answer after the first query, as a rebinding attacker's DNS does.

The portal resolves a name once per request and connects to what it checked; a second
resolution (the rebinding window) would get the second answer and go somewhere else, which the
tests see.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field


@dataclass
class ScriptedDns:
    answers: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def answer(self, host: str, *addresses: str) -> None:
        """``host`` resolves to ``addresses``, every time."""
        self.answers[host] = (list(addresses), list(addresses))

    def rebind(self, host: str, first: str, then: str) -> None:
        """``host`` resolves to ``first`` on the first query and to ``then`` on every later one."""
        self.answers[host] = ([first], [then])

    def resolve(self, host: str, port: int) -> list[str]:
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not in the test's DNS")
        first, then = self.answers[host]
        answer = then if host in self.asked else first
        self.asked.append(host)
        return answer


SCRIPT = ScriptedDns()


def resolve(host: str, port: int) -> list[str]:
    return SCRIPT.resolve(host, port)
