import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("mailservice")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(sender, **_) -> None:
    """Around each task, what Django does around each request: keep the database connection for
    CONN_MAX_AGE, drop it once it is broken or too old. (Celery's own Django fixup would close it
    after every task, a new PostgreSQL backend per batch; CELERY_DB_REUSE_MAX turns that off.)
    An eager task runs inside its caller's request or transaction, whose connection is not its own."""
    from django.db import close_old_connections

    if not sender.request.is_eager:
        close_old_connections()


@worker_init.connect
def _refuse_to_start_without_encryption_keys(**_) -> None:
    """A worker signs every message with a DKIM key stored encrypted: without the keys it could only
    fail them one by one, so it stops at start-up with the setting's error instead. (Celery logs and
    ignores an Exception from a signal handler; SystemExit does stop it.)"""
    from django.core.exceptions import ImproperlyConfigured

    from mailservice.encryption import require_encryption_keys

    try:
        require_encryption_keys()
    except ImproperlyConfigured as exc:
        raise SystemExit(f"ImproperlyConfigured: {exc}") from None
