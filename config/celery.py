import os
import sys
from typing import TYPE_CHECKING, Any

from celery import Celery, bootsteps
from celery.signals import task_postrun, task_prerun, worker_init

from config.startup import one_line_errors

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

if TYPE_CHECKING:
    from messaging.outbound.loop import DispatchLoop

app = Celery("mailservice")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.autodiscover_tasks(["messaging.outbound"])  # dispatch's tasks live with outbound (messaging/outbound/tasks.py)
# Report mails are read off the SMTP session by tasks of their own (messaging/inbound/aggregate/tasks.py).
app.autodiscover_tasks(["messaging.inbound.aggregate"])


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(sender: Any, **_: Any) -> None:
    """Around each task, what Django does around each request: keep the database connection for
    CONN_MAX_AGE, drop it once it is broken or too old. (Celery's own Django fixup would close it
    after every task, a new PostgreSQL backend per batch; CELERY_DB_REUSE_MAX turns that off.)
    An eager task runs inside its caller's request or transaction, whose connection is not its own."""
    from django.db import close_old_connections

    if not sender.request.is_eager:
        close_old_connections()


@worker_init.connect
def _refuse_to_start_without_encryption_keys(**_: Any) -> None:
    """A worker signs every message with a DKIM key stored encrypted: without the keys it could only
    fail them one by one, so it stops at start-up with the setting's error instead. (Celery logs and
    ignores an Exception from a signal handler; SystemExit does stop it.)"""
    from django.core.exceptions import ImproperlyConfigured

    from mailservice.encryption import require_encryption_keys

    try:
        require_encryption_keys()
    except ImproperlyConfigured as exc:
        raise SystemExit(f"ImproperlyConfigured: {exc}") from None


@worker_init.connect
def _refuse_to_start_on_an_unsafe_database(**_: Any) -> None:
    """A worker records each outcome as the proof a message went out once: on a PostgreSQL that may lose
    commits in a crash it could send again, so it stops with one line naming the setting. A database it
    cannot reach yet is not refused here: the worker waits for it, and /readyz checks again."""
    from django.db import DatabaseError, connection

    from mailservice.durability import unsafe_durability_message, unsafe_durability_settings

    try:
        unsafe = unsafe_durability_settings()
    except DatabaseError:
        return
    finally:
        connection.close()  # the start-up thread's: tasks and the dispatch loop open their own
    if unsafe:
        raise SystemExit(f"ImproperlyConfigured: {unsafe_durability_message(unsafe)}")


class DispatchLoopStep(bootsteps.StartStopStep):
    """A worker that consumes the default queue (where dispatch tasks go) also runs the dispatch loop
    (messaging/outbound/loop.py) on PostgreSQL, with as many threads as its pool: sends wake it
    through the database instead of a task each. The webhooks worker (-Q webhooks) does not."""

    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.loop: DispatchLoop | None = None

    def start(self, worker: Any) -> None:
        from django.conf import settings
        from django.db import connection

        from messaging.outbound.direct.destinations import public_suffixes_load
        from messaging.outbound.loop import DispatchLoop, listening_database
        from messaging.outbound.tasks import dispatch_woken
        from messaging.outbound.transports import is_direct_delivery

        dispatches = settings.CELERY_TASK_DEFAULT_QUEUE in worker.app.amqp.queues.consume_from
        if not dispatches or connection.vendor != "postgresql":
            return
        if settings.EMAIL_URL and is_direct_delivery(settings.EMAIL_URL):
            public_suffixes_load()
        batch_size = settings.MAILSERVICE_DISPATCH_BATCH_SIZE
        self.loop = DispatchLoop(
            threads=worker.concurrency, dispatch=dispatch_woken, batch_size=batch_size, listen_to=listening_database()
        )
        self.loop.start()

    def stop(self, worker: Any) -> None:
        from messaging.outbound.transports import close_transports

        if self.loop is not None:
            self.loop.stop()  # as Celery's warm shutdown waits for its tasks: batches in progress end
        close_transports()  # after the batches: the sessions they kept open between them


app.steps["worker"].add(DispatchLoopStep)


if os.path.basename(sys.argv[0]) == "celery":
    # Set Django up now, where a bad setting is one line: Celery's Django fixup would do it inside a signal
    # handler that logs the error with its traceback, then fails again with another.
    import django

    with one_line_errors("celery"):
        django.setup()
