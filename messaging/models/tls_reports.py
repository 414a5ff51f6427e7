"""The TLS reports this service sends (RFC 8460): each day's session counts, and what became of each
report sent (messaging/tls_reports/)."""

from django.db import models


class TlsPolicyType(models.TextChoices):
    """RFC 8460 §4.4 policy-type: the policy a direct-delivery session was held to."""

    STS = "sts", "MTA-STS"
    TLSA = "tlsa", "DANE (TLSA)"
    NO_POLICY = "no-policy-found", "no policy found"


class TlsSessionCount(models.Model):
    """Direct-delivery SMTP sessions of one UTC day, counted per TLS-RPT report line (RFC 8460):
    one row per policy applied, MX host, receiving address and result (empty: success).

    Written by one UPSERT per session (messaging/tls_reports/counts.py), read by the daily report."""

    day = models.DateField(help_text="The UTC day of the sessions")
    policy_domain = models.CharField(max_length=253, help_text="The recipient domain whose policy applied (A-label)")
    policy_type = models.CharField(max_length=16, choices=TlsPolicyType.choices)
    policy_strings = models.JSONField(default=list, help_text="The applied policy, one string per line")
    policy_hash = models.CharField(max_length=64, editable=False, help_text="SHA-256 of the policy strings")
    mx_host = models.CharField(max_length=253, blank=True)
    receiving_ip = models.CharField(max_length=45, blank=True)
    result_type = models.CharField(
        max_length=40, blank=True, help_text="An RFC 8460 §4.3 result type; empty for a successful session"
    )
    sessions = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # The UPSERT's conflict target; its index also serves the report's reads: a day's policy
            # domains (`day`), then one domain's rows (`day`, `policy_domain`).
            models.UniqueConstraint(
                fields=[
                    "day",
                    "policy_domain",
                    "policy_type",
                    "policy_hash",
                    "mx_host",
                    "receiving_ip",
                    "result_type",
                ],
                name="tls_session_count_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.policy_domain} {self.policy_type} {self.result_type or 'success'}: {self.sessions}"


class TlsReportStatus(models.TextChoices):
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


class TlsReportSubmission(models.Model):
    """One day's TLS report of a policy domain to one of its `rua` addresses: sent once.

    A `mailto:` report is recorded `sent` in the transaction that stores its message. An `https:` one is
    claimed (`sending`) before the POST and marked after it; a `failed` one is tried again by the next
    run, one left `sending` by a killed run is not (at most once)."""

    day = models.DateField(help_text="The UTC day the report covers")
    policy_domain = models.CharField(max_length=253)
    rua = models.CharField(max_length=500, help_text="Where the report went: a mailto: or https: URI")
    report_id = models.CharField(max_length=100)
    status = models.CharField(max_length=8, choices=TlsReportStatus.choices)
    detail = models.TextField(blank=True, help_text="The message id, the HTTP status, or why it failed")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # The claim: a second run for the same day finds the row and sends nothing.
            models.UniqueConstraint(fields=["day", "policy_domain", "rua"], name="tls_report_submission_once"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.policy_domain} → {self.rua}: {self.status}"
