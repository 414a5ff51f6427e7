"""The report mails' Celery tasks: read one off the SMTP session, and sweep up those whose task was lost."""

from celery import shared_task

from messaging.inbound.aggregate.services import aggregate_process, aggregate_unread

SWEEP_GRACE_SECONDS = 60.0  # a mail still unread this long after it came has lost its task


@shared_task(name="messaging.aggregate_report_read")
def aggregate_report_read_task(mail_id: int) -> str:
    mail = aggregate_process(mail_id=mail_id)
    return mail.outcome if mail is not None else "already read"


@shared_task(name="messaging.aggregate_reports_sweep")
def aggregate_reports_sweep_task() -> int:
    unread = aggregate_unread(older_than=SWEEP_GRACE_SECONDS)
    for mail_id in unread:
        aggregate_report_read_task.delay(mail_id)
    return len(unread)
