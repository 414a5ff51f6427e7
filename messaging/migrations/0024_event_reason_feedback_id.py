"""Why a receiver refused or deferred mail, as an application acts on it: an event's `reason`
(messaging/refusals.py); whether a complaint came from a trusted feedback loop
(messaging/inbound/feedback_loops.py); and the Feedback-ID header a message goes out with
(messaging/feedback_id.py). Rows written before stay blank or NULL (no backfill): constant column
defaults, so PostgreSQL adds the columns without rewriting the tables. The partial index serves the
console's filter of a domain's messages by reason and the domain's refusal health."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('messaging', '0023_reports_within_budgets'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='feedback_id',
            field=models.CharField(blank=True, db_default='', default='', help_text='The Feedback-ID header it goes out with: template or inline, API key, domain, sender id', max_length=255),
        ),
        migrations.AddField(
            model_name='messageevent',
            name='complaint_authenticated',
            field=models.BooleanField(blank=True, help_text='Complaints: from a trusted feedback loop (messaging/inbound/feedback_loops.py); unauthenticated ones count toward the safeguard only with MAILSERVICE_COMPLAINTS_UNAUTHENTICATED=count', null=True),
        ),
        migrations.AddField(
            model_name='messageevent',
            name='reason',
            field=models.CharField(blank=True, choices=[('user_unknown', 'User Unknown'), ('mailbox_full', 'Mailbox Full'), ('mailbox_disabled', 'Mailbox Disabled'), ('domain_not_found', 'Domain Not Found'), ('host_unreachable', 'Host Unreachable'), ('blocked', 'Blocked'), ('spam_detected', 'Spam Detected'), ('content_rejected', 'Content Rejected'), ('authentication', 'Authentication'), ('policy', 'Policy'), ('rate_limited', 'Rate Limited'), ('greylisted', 'Greylisted'), ('expired', 'Expired'), ('other', 'Other')], db_default='', default='', help_text='Delays, bounces and failures: why, as an application acts on it (docs/webhooks.md)', max_length=20),
        ),
        migrations.AddIndex(
            model_name='messageevent',
            index=models.Index(condition=models.Q(('reason', ''), _negated=True), fields=['reason', 'created_at', 'message'], name='event_reason_idx'),
        ),
    ]
