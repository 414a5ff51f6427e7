"""Liveness and readiness: what /healthz and /readyz report (load balancers, systemd, Kubernetes)."""

from collections.abc import Callable
from functools import cache

from django.conf import settings
from django.core.cache import cache as django_cache
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from kombu import Connection

from mailservice.durability import unsafe_durability_message, unsafe_durability_settings

# Seconds a probe waits for the cache or the broker before it counts as unreachable.
PROBE_TIMEOUT = 2

OK = "ok"


def _check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return OK


@cache
def _all_migrations_applied() -> bool:
    """Loading the migration graph costs tens of milliseconds, so a process asks once it is true: the
    set of migrations only changes with a deploy, which starts new processes."""
    executor = MigrationExecutor(connection)
    return not executor.migration_plan(executor.loader.graph.leaf_nodes())


def _check_migrations() -> str:
    if _all_migrations_applied():
        return OK
    _all_migrations_applied.cache_clear()  # not cached while false: `migrate` may run any moment
    return "unapplied migrations: run manage.py migrate"


def _check_durability() -> str:
    unsafe = unsafe_durability_settings()
    return unsafe_durability_message(unsafe) if unsafe else OK


def _check_cache() -> str:
    django_cache.set("mailservice:readyz", "1", timeout=10)
    return OK if django_cache.get("mailservice:readyz") == "1" else "the cache did not keep a value"


def _check_broker() -> str:
    if settings.CELERY_BROKER_URL is None:
        return OK  # no broker configured: tasks run in-process (the embedded default)
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=PROBE_TIMEOUT) as broker:
        broker.ensure_connection(max_retries=1, interval_start=0, timeout=PROBE_TIMEOUT)
    return OK


_CHECKS: dict[str, Callable[[], str]] = {
    "database": _check_database,
    "migrations": _check_migrations,
    "durability": _check_durability,
    "cache": _check_cache,
    "broker": _check_broker,
}


def readiness() -> dict[str, str]:
    """Each dependency's state: "ok", or why it is not. Migrations and durability are only checked on a
    reachable database."""
    results: dict[str, str] = {}
    for name, check in _CHECKS.items():
        if name in {"migrations", "durability"} and results["database"] != OK:
            results[name] = "not checked: the database is unreachable"
            continue
        try:
            results[name] = check()
        except Exception as exc:  # noqa: BLE001 - any failure is an answer here, never a 500
            results[name] = f"unreachable: {type(exc).__name__}"
    return results
