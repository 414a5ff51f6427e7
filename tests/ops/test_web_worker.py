"""The web worker's start-up: the application loaded, then kept out of the garbage collector's full
collections (config/workers.py)."""

import gc
from types import SimpleNamespace

import pytest

from config.workers import WebWorker


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_loading_the_application_freezes_what_start_up_loaded(unfrozen):
    worker = WebWorker.__new__(WebWorker)  # gunicorn builds it in the forked process; only loading is under test
    worker.app = SimpleNamespace(wsgi=lambda: "the application")
    worker.load_wsgi()
    assert worker.wsgi == "the application"
    assert gc.get_freeze_count() > 10_000  # the interpreter, Django and the project
