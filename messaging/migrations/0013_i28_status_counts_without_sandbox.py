"""Take sandbox mail out of the dashboard's counts rolled up before the rollup left it out.

The events of test keys' messages that the rollup had counted (ids up to its last_event_id) are
subtracted from the hourly and daily rows they were added to. Test messages already purged took
their events with them and cannot be subtracted; their counts age out of the dashboard's 14 days.
"""

from django.db import migrations
from django.db.models import Count, F
from django.db.models.functions import Greatest, TruncHour

COUNTED = ["accepted", "delivered", "bounced", "complained", "failed", "received"]  # CountedEvent's values


def subtract_sandbox_counts(apps, schema_editor):
    rollup_model = apps.get_model("messaging", "StatusCountRollup")
    event_model = apps.get_model("messaging", "MessageEvent")
    hourly_model = apps.get_model("messaging", "HourlyStatusCount")
    daily_model = apps.get_model("messaging", "DailyStatusCount")
    rollup = rollup_model.objects.select_for_update().filter(pk=1).first()  # no rollup pass meanwhile
    if rollup is None:
        return
    rows = (
        event_model.objects.filter(id__lte=rollup.last_event_id, type__in=COUNTED, message__is_test=True)
        .annotate(hour=TruncHour("created_at"))
        .values_list("hour", "message__domain_id", "type")
        .annotate(n=Count("id"))
        .order_by()
    )
    daily: dict[tuple, int] = {}
    for hour, domain_id, kind, n in rows:
        hourly_model.objects.filter(hour=hour, domain_id=domain_id, kind=kind).update(count=Greatest(F("count") - n, 0))
        daily[hour.date(), domain_id, kind] = daily.get((hour.date(), domain_id, kind), 0) + n
    for (day, domain_id, kind), n in daily.items():
        daily_model.objects.filter(day=day, domain_id=domain_id, kind=kind).update(count=Greatest(F("count") - n, 0))


class Migration(migrations.Migration):
    dependencies = [
        ("messaging", "0012_i28_idempotency_per_sandbox"),
    ]

    operations = [
        # Backwards there is nothing to restore: the subtracted counts were wrong.
        migrations.RunPython(subtract_sandbox_counts, migrations.RunPython.noop),
    ]
