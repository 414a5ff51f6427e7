"""Why a receiver deferred or refused mail: an event's `cause` and, for an authentication refusal, the
readiness check to fix (since read by messaging/refusals.py). Rows written before stay blank (no backfill): a
constant column default, so PostgreSQL adds each column without rewriting the table."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('messaging', '0016_dmarc_and_tls_reports'),
    ]

    operations = [
        migrations.AddField(
            model_name='messageevent',
            name='cause',
            field=models.CharField(blank=True, choices=[('authentication', 'Authentication'), ('reputation', 'Reputation'), ('rate_limited', 'Rate Limited'), ('policy', 'Policy'), ('mailbox', 'Mailbox'), ('other', 'Other')], db_default='', default='', help_text="Delays, bounces and failures: why, as the receiver's reply codes say", max_length=16),
        ),
        migrations.AddField(
            model_name='messageevent',
            name='fix_check',
            field=models.CharField(blank=True, db_default='', default='', help_text='An authentication refusal: the readiness check to fix (manage.py check_readiness DOMAIN)', max_length=16),
        ),
    ]
