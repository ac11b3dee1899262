"""portal.collector: the web and worker processes freeze what start-up built and raise the
collector's thresholds, each in a new interpreter as the server and the prefork pool start them."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from portal.collector import THRESHOLDS
from tests.conftest import ROOT, child_env

REPORT = "import gc; print(repr((gc.get_threshold(), gc.get_freeze_count())))"


def child(script: str) -> tuple[tuple[int, int, int], int]:
    """(thresholds, frozen objects) printed by ``script``'s last line, run as a portal process."""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


@pytest.mark.django_db
def test_an_interpreter_starts_with_pythons_thresholds_and_nothing_frozen():
    thresholds, frozen = child(REPORT)
    assert thresholds != THRESHOLDS
    assert frozen == 0


@pytest.mark.django_db
def test_the_web_process_freezes_what_it_loaded_and_raises_the_thresholds():
    thresholds, frozen = child(f"import portal.asgi; {REPORT}")
    assert thresholds == THRESHOLDS
    assert frozen > 50_000  # Django, the URLconf, the models, Channels: well over a few objects


@pytest.mark.django_db
def test_a_worker_process_is_tuned_when_the_pool_starts_it():
    # The signal a prefork pool sends in each new worker process (and the solo pool in its one).
    before, after = child(
        "import gc; from portal.celery import app; app.loader.import_default_modules();"
        " before = (gc.get_threshold(), gc.get_freeze_count());"
        " from celery.signals import worker_process_init; worker_process_init.send(sender='test-worker');"
        " print(repr((before, (gc.get_threshold(), gc.get_freeze_count()))))"
    )
    assert before[0] != THRESHOLDS and before[1] == 0
    thresholds, frozen = after
    assert thresholds == THRESHOLDS
    assert frozen > 50_000  # Django set up and the tasks imported before the pool forks
