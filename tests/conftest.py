import importlib

import pytest
from django.apps import apps
from django.db.models.signals import post_migrate
from rest_framework.test import APIClient

from apikeys.models import ApiKey, Permission
from domains.models import Domain
from messaging.outbound.direct.sessions import idle_sessions
from tests.factories import ApiKeyFactory, DomainFactory

# The live-process harness: its fixtures (live_web, live_inbound, live_sink) and, for a failed
# test, the logs of the child processes it ran.
pytest_plugins = ["tests.harness.plugin", "tests.harness.template_db", "tests.harness.timings"]


def _restore_support_group(sender, using: str = "default", **kwargs) -> None:
    """A transactional test ends by emptying every table (Django's flush), which also removes the console's
    "support" group its data migration made; flush then sends post_migrate, and this makes it again. Serial
    runs put transactional tests last, but a pytest-xdist worker runs a later file's tests after them."""
    if sender.name == "django.contrib.auth":  # mailservice has no models, so flush sends it no post_migrate
        importlib.import_module("mailservice.migrations.0001_support_group").create_support_group(apps, None)


post_migrate.connect(_restore_support_group, dispatch_uid="tests.restore_support_group")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `make test` (pytest-xdist's loadgroup), a file's tests run on one worker, so its module-scoped
    servers start once; a test that names an xdist_group of its own runs apart from its file."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """The slow tests first, after every reordering of collection (pytest-django's puts tests without a
    database last) and before pytest-xdist hands out the work in this order: none is left to the end."""
    session.items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _isolated_cache():
    """Rate-limit counters and other cache state never leak between tests."""
    from django.core.cache import cache

    from messaging.outbound.direct.destinations import noted_recently

    cache.clear()
    noted_recently.clear()
    yield
    cache.clear()
    noted_recently.clear()


@pytest.fixture(autouse=True)
def _no_idle_mx_sessions():
    """Direct delivery's sessions kept open between batches end with their test: a later test's receivers
    count only its own connections, and no connection slot stays taken."""
    yield
    idle_sessions.close_all()


@pytest.fixture(params=["one statement", "ORM twin"])
def sql_path(request, monkeypatch) -> str:
    """Runs a test twice on PostgreSQL: with the hand-written statements (messaging/sql.py), and with
    them turned off so the services take their ORM twins, as on SQLite. Use it through
    `pytestmark = pytest.mark.usefixtures("sql_path")` in the modules of the affected services."""
    from django.db import connection

    from messaging import sql

    if request.param == "one statement" and connection.vendor != "postgresql":
        pytest.skip("the hand-written statements need PostgreSQL")
    if request.param == "ORM twin":
        monkeypatch.setattr(sql, "available", lambda: False)
    return request.param


@pytest.fixture
def domain(db) -> Domain:
    return DomainFactory(name="acme.example.com")


@pytest.fixture
def full_key(domain: Domain) -> ApiKey:
    return ApiKeyFactory(domain=domain, permissions=(Permission.SEND, Permission.READ))


@pytest.fixture
def send_only_key(domain: Domain) -> ApiKey:
    return ApiKeyFactory(domain=domain, permissions=(Permission.SEND,))


@pytest.fixture
def read_only_key(domain: Domain) -> ApiKey:
    return ApiKeyFactory(domain=domain, permissions=(Permission.READ,))


@pytest.fixture
def other_domain_key(db) -> ApiKey:
    return ApiKeyFactory(domain=DomainFactory(name="other.example.net"))


def client_for(api_key: ApiKey | None) -> APIClient:
    client = APIClient()
    if api_key is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key.secret}")
    return client


@pytest.fixture
def api(full_key: ApiKey) -> APIClient:
    return client_for(full_key)
