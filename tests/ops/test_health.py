"""/healthz and /readyz: what a load balancer, systemd or an orchestrator asks before sending traffic."""

import subprocess
import sys

import httpx
import pytest
from django.test import Client

from tests.harness import ROOT, PostgresCluster, child_env, running, web_server


@pytest.mark.django_db
def test_healthz_answers_without_touching_the_database(django_assert_num_queries, settings):
    settings.MAILSERVICE_RATE_LIMIT = "1/m"  # the API's limit does not apply to probes
    with django_assert_num_queries(0):
        for _ in range(3):
            response = Client().get("/healthz")
            assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_200_when_every_dependency_answers():
    response = Client().get("/readyz")

    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ok",
        "failed": [],
        "checks": {"database": "ok", "migrations": "ok", "durability": "ok", "cache": "ok", "broker": "ok"},
    }


@pytest.mark.django_db
def test_readyz_names_an_unreachable_broker(settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"

    response = Client().get("/readyz")

    assert response.status_code == 503
    assert response.json()["failed"] == ["broker"]
    assert response.json()["checks"]["broker"].startswith("unreachable")


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_the_probes_take_only_get_and_head(method):
    assert Client().generic(method, "/readyz").status_code == 405


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_readyz_follows_a_private_postgresql_through_migrate_and_a_stop():
    unsafe = {"MAILSERVICE_ALLOW_UNSAFE_DURABILITY": "true"}  # the private cluster runs with fsync=off
    with running(PostgresCluster()) as cluster:
        url = cluster.create_database("readyz")
        with web_server(workers=1, DATABASE_URL=url, **unsafe) as base_url:
            unmigrated = httpx.get(f"{base_url}/readyz", timeout=30)
            assert unmigrated.status_code == 503 and unmigrated.json()["failed"] == ["migrations"]

            migrate = [sys.executable, "manage.py", "migrate", "--verbosity", "0"]
            subprocess.run(migrate, cwd=ROOT, env=child_env(DATABASE_URL=url, **unsafe), check=True, timeout=300)
            assert httpx.get(f"{base_url}/readyz", timeout=30).status_code == 200

            cluster.pg_ctl("stop")
            stopped = httpx.get(f"{base_url}/readyz", timeout=30)
            assert stopped.status_code == 503
            assert stopped.json()["failed"] == ["database", "migrations", "durability"]
            assert stopped.json()["checks"]["database"].startswith("unreachable")
            assert httpx.get(f"{base_url}/healthz", timeout=30).status_code == 200  # alive all the same

            cluster.pg_ctl("start")
            assert httpx.get(f"{base_url}/readyz", timeout=30).status_code == 200
