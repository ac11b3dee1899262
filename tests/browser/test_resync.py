"""The web process loses its Redis subscription and gets it back: the open page reads its sessions again.

An update published while the subscription is down is gone (Redis Pub/Sub keeps nothing). The
test stands for one by changing the session in the database without publishing anything, then
kills the Daphne process's subscribing connection on the Redis server; the page, told by its
socket, shows the change without a reload (``portal.channel_layer``, ``sessions.js``).
"""

from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import expect

from labs.models import Allocation, LabSession
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from tests.browser.test_student_launch import log_in
from tests.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REDIS_PORT = 6379


def redis_connections_of(pid: int) -> set[int]:
    """The local ports of process ``pid``'s TCP connections to Redis (from /proc: its sockets' inodes)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == REDIS_PORT:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def subscribers_of(pid: int) -> list[str]:
    """The addresses (as Redis sees them) of process ``pid``'s Pub/Sub connections."""
    ports = redis_connections_of(pid)
    clients = redis.Redis.from_url(settings.REDIS_URL).client_list(_type="pubsub")
    return [c["addr"] for c in clients if int(c["addr"].rsplit(":", 1)[1]) in ports]


def kill_subscriber(pid: int) -> None:
    """Close the Redis Pub/Sub connection of process ``pid`` from the server's side."""
    subscribers = subscribers_of(pid)
    assert len(subscribers) == 1, subscribers  # the one Daphne process's one shard
    redis.Redis.from_url(settings.REDIS_URL).client_kill(subscribers[0])


def test_a_lost_subscription_makes_the_open_page_read_its_sessions_again(world, portal_server, browser_page):
    from tests.factories import UserFactory

    student = UserFactory(username="ada")
    world["course"].enrollments.create(user=student, role="student")
    session = session_launch(student=student, course=world["course"], template=world["small"])  # no worker: stays queued
    page = browser_page
    log_in(page, portal_server, "ada")
    expect(page.locator("body[data-live=yes]")).to_have_count(1)
    card = page.locator(f"#sessions article.session[data-session-id='{session.pk}']")
    expect(card).to_have_attribute("data-state", "queued")
    page.evaluate("window.__notReloaded = true")
    # The read of the moving sessions that follows the socket's open has been answered.
    page.wait_for_function(
        "(path) => performance.getEntriesByType('resource').some((e) => e.name.endsWith(path))",
        arg=f"/sessions/{session.pk}/",
    )

    # A change whose message would have been lost: nothing is published for it.
    LabSession.objects.filter(pk=session.pk).update(state="stopped", ended_at=timezone.now(), version=session.version + 1)
    kill_subscriber(portal_server.pid)

    expect(card).to_have_attribute("data-state", "stopped", timeout=15_000)
    assert page.evaluate("window.__notReloaded") is True, "the page reloaded"


def test_the_instructor_console_reads_its_courses_use_again(world, portal_server, browser_page):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()  # admitted: one instance of the course's quota in use
    page = browser_page
    log_in(page, portal_server, world["instructor"].username, lands_on="Courses you teach")
    in_use = page.locator(f"[data-course-use='{world['course'].pk}'] [data-use=instances]")
    expect(in_use).to_have_text("1")
    page.evaluate("window.__notReloaded = true")
    # The console's socket has subscribed (it has no "live" mark) and its first read is done:
    # from here on only a message can make it read again.
    wait_for(lambda: subscribers_of(portal_server.pid), timeout=10)
    page.wait_for_function(
        "(path) => performance.getEntriesByType('resource').some((e) => e.name.endsWith(path))",
        arg=page.locator(f"[data-course-use='{world['course'].pk}']").get_attribute("data-use-url"),
    )

    Allocation.objects.filter(session=session).update(released_at=timezone.now())  # nothing published
    kill_subscriber(portal_server.pid)

    expect(in_use).to_have_text("0", timeout=15_000)
    assert page.evaluate("window.__notReloaded") is True, "the page reloaded"
