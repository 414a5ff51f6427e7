"""Events as data: the reply code, enhanced status, diagnostic, bounce type and relay host of an event
are recorded with it (the enhanced status column is the former `status_code`, renamed).

Rows written before this carry those only in the prose of `detail`: the backfill reads it once, in
batches of primary keys, as webhooks/payloads.py used to read it for every webhook, so an old event's
payload is the same after the migration as before it. The relay host was never recorded: it stays blank.
"""

import re

from django.db import migrations, models

BATCH = 2000

# The patterns webhooks/payloads.py matched `detail` with before the fields existed; now only here.
SMTP_REPLY = re.compile(r"([245]\d\d)[ -]+(?:([245]\.\d{1,3}\.\d{1,3})\b)?")
DSN_STATUS = re.compile(r"([245]\.\d{1,3}\.\d{1,3})\b\s*")
FEEDBACK_TYPE = re.compile(r"(?:feedback-type:\s*)?([\w-]+)", re.IGNORECASE)

# The event types whose detail is (or holds) a reply or a report's diagnostic; MessageEventType's values.
BOUNCES = {"recipient_rejected", "bounced", "soft_bounced"}
PARSED = BOUNCES | {"delivered", "delayed"}
# Dispatch's notes (deferred, failed, suppressed) are published as written: nothing to parse.


def parsed(event) -> list[str]:
    """Fill `event`'s fields from its detail, as the payload builder read it; the names of the fields set."""
    detail = event.detail
    if event.type == "complained":
        feedback = FEEDBACK_TYPE.match(detail)
        if event.feedback_type or not feedback:
            return []
        event.feedback_type = feedback.group(1).lower()[:32]
        return ["feedback_type"]
    reply = SMTP_REPLY.match(detail)
    dsn = None if reply else DSN_STATUS.match(detail)
    status = ""
    if reply:
        event.smtp_code = int(reply.group(1))
        event.diagnostic = detail[reply.end(1) :].lstrip(" -")
        status = reply.group(2) or ""
    elif dsn:
        status = dsn.group(1)
        event.diagnostic = detail[dsn.end() :]
    else:
        event.diagnostic = detail
    event.enhanced_status = event.enhanced_status or status
    if event.type in BOUNCES:
        code = event.enhanced_status or (reply.group(1) if reply else "5")
        event.bounce_type = "soft" if event.type == "soft_bounced" or code.startswith("4") else "hard"
    return ["smtp_code", "diagnostic", "enhanced_status", "bounce_type"]


def backfill(apps, schema_editor):
    event_model = apps.get_model("messaging", "MessageEvent")
    rows = event_model.objects.filter(type__in=PARSED | {"complained"}).order_by("pk")
    last = 0
    while batch := list(rows.filter(pk__gt=last)[:BATCH]):
        last = batch[-1].pk
        changed: dict[tuple[str, ...], list] = {}
        for event in batch:
            if names := parsed(event):
                changed.setdefault(tuple(names), []).append(event)
        for names, events in changed.items():
            event_model.objects.bulk_update(events, list(names))


class Migration(migrations.Migration):
    dependencies = [("messaging", "0013_i28_status_counts_without_sandbox")]

    operations = [
        migrations.RenameField(model_name="messageevent", old_name="status_code", new_name="enhanced_status"),
        migrations.AddField(
            model_name="messageevent",
            name="smtp_code",
            field=models.PositiveSmallIntegerField(
                blank=True, null=True, help_text="The SMTP reply code the relay (or the sandbox) answered, e.g. 550"
            ),
        ),
        migrations.AddField(
            model_name="messageevent",
            name="diagnostic",
            field=models.TextField(
                blank=True, db_default="", default="", help_text="The reply's text, or the report's Diagnostic-Code"
            ),
        ),
        migrations.AddField(
            model_name="messageevent",
            name="bounce_type",
            field=models.CharField(
                blank=True,
                choices=[("hard", "Hard"), ("soft", "Soft")],
                db_default="",
                default="",
                help_text="Bounces only",
                max_length=4,
            ),
        ),
        migrations.AddField(
            model_name="messageevent",
            name="remote_host",
            field=models.CharField(
                blank=True, db_default="", default="", help_text="The relay that answered, when known", max_length=255
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
