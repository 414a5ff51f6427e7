"""The no-loss promise needs PostgreSQL's fsync and synchronous_commit on: /readyz fails naming the
setting, and the dispatch worker refuses to start, unless MAILSERVICE_ALLOW_UNSAFE_DURABILITY=true."""

import subprocess

import httpx
import pytest
from django.db import connection
from django.test import Client

from tests.harness import ROOT, PostgresCluster, child_env, running, web_server
from tests.harness.process import BIN

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL setting")


@pytest.mark.django_db
@pytest.mark.parametrize("allowed", [False, True])
def test_readyz_fails_on_synchronous_commit_off_unless_allowed(settings, allowed):
    settings.MAILSERVICE_ALLOW_UNSAFE_DURABILITY = allowed
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")  # this test's transaction: the probe's session

    response = Client().get("/readyz")

    if allowed:
        assert response.status_code == 200, response.content
    else:
        assert response.status_code == 503
        assert response.json()["failed"] == ["durability"]
        check = response.json()["checks"]["durability"]
        assert check.startswith("PostgreSQL runs with synchronous_commit=off")
        assert "MAILSERVICE_ALLOW_UNSAFE_DURABILITY=true" in check


@pytest.mark.live
@pytest.mark.django_db
def test_a_postgresql_with_fsync_off_fails_readyz_and_stops_the_worker():
    with running(PostgresCluster()) as cluster:  # started with fsync=off, for speed
        url = cluster.create_database("unsafe")
        with web_server(workers=1, DATABASE_URL=url) as base_url:
            response = httpx.get(f"{base_url}/readyz", timeout=30)
        worker = subprocess.run(
            [str(BIN / "celery"), "-A", "config", "worker", "--pool", "solo"],
            cwd=ROOT,
            env=child_env(DATABASE_URL=url, CELERY_TASK_DEFAULT_QUEUE="never-used"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert response.status_code == 503
    assert "durability" in response.json()["failed"]
    assert response.json()["checks"]["durability"].startswith("PostgreSQL runs with fsync=off: ")
    assert worker.returncode == 1
    lines = [line for line in worker.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("ImproperlyConfigured: PostgreSQL runs with fsync=off: "), worker.stderr
