"""The aggregate reports other services send to us (DMARC, TLS-RPT): the mail they came in and what
was read from it (messaging/inbound/aggregate/)."""

from django.db import models

from domains.models import Domain


class AggregateKind(models.TextChoices):
    DMARC = "dmarc", "DMARC aggregate report"
    TLS = "tls", "SMTP TLS report"


class ReportMailOutcome(models.TextChoices):
    RECEIVED = "received", "received, waiting to be read (off the SMTP session)"
    STORED = "stored", "stored as a report"
    DUPLICATE = "duplicate", "already stored (the reporter sent it again)"
    REFUSED = "refused", "not stored as a report (see the reason)"


class ReportMail(models.Model):
    """A message received at `dmarc-reports@` or `tls-reports@` the return-path domain, kept whole with
    what became of it: a report that cannot be read, or is about a domain the service does not know,
    stays here with the reason (it was answered 250, so the reporter does not retry it)."""

    kind = models.CharField(max_length=8, choices=AggregateKind.choices)
    outcome = models.CharField(max_length=10, choices=ReportMailOutcome.choices)
    reason = models.TextField(blank=True, help_text="Why it was not stored as a report, for outcome 'refused'")
    domain = models.ForeignKey(
        Domain, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The domain it reports on"
    )
    envelope_from = models.CharField(max_length=320, blank=True)
    peer_ip = models.GenericIPAddressField(null=True, blank=True, help_text="The address that sent it: SPF's input")
    helo = models.CharField(max_length=255, blank=True, help_text="The name it gave in HELO/EHLO")
    subject = models.CharField(max_length=998, blank=True)
    raw = models.BinaryField(help_text="The message as received")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # The console's list of report mail, newest first, filtered by outcome.
            models.Index(fields=["outcome", "-created_at"], name="report_mail_outcome_idx"),
            # Retention's purge of what is past MAILSERVICE_RETENTION_DAYS (messaging/retention.py).
            models.Index(fields=["created_at"], name="report_mail_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} from <{self.envelope_from}>: {self.outcome}"


class DmarcReport(models.Model):
    """One DMARC aggregate report about a domain: one reporter's view of one period."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="dmarc_reports")
    org_name = models.CharField(max_length=255, help_text="The reporter, as it names itself")
    report_id = models.CharField(max_length=255)
    begin = models.DateTimeField()
    end = models.DateTimeField(help_text="End of the period; summaries count reports by it")
    policy = models.CharField(max_length=16, blank=True, help_text="The published p= the reporter saw")
    authenticated = models.BooleanField(
        default=False,
        help_text="Its mail was DKIM- or SPF-aligned with the report's email domain; summaries count these by default",
    )
    rows = models.PositiveIntegerField(default=0, help_text="Its records: what MAILSERVICE_REPORT_DAILY_ROWS counts")
    # The mail goes with retention (messaging.retention.report_data_purge); the report stays.
    mail = models.ForeignKey(
        ReportMail, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The mail it came in"
    )
    published_at = models.DateTimeField(
        null=True, blank=True, help_text="When its domain.dmarc_report webhook event was fanned out"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # A report sent again (reporters retry, forward, resend) is counted once.
            models.UniqueConstraint(fields=["domain", "org_name", "report_id"], name="dmarc_report_once"),
        ]
        indexes = [
            # dmarc_summary and the console's chart: a domain's reports ending within the last N days.
            models.Index(fields=["domain", "end"], name="dmarc_report_domain_end_idx"),
            # The daily row budget: the rows a domain's reports stored today (MAILSERVICE_REPORT_DAILY_ROWS).
            models.Index(fields=["domain", "created_at"], name="dmarc_report_domain_day_idx"),
            # The webhooks' fan-out: reports not yet published, oldest first.
            models.Index(
                fields=["id"], condition=models.Q(published_at__isnull=True), name="dmarc_report_unpublished_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.org_name} {self.report_id} about {self.domain_id}"


class DmarcRecord(models.Model):
    """One row of a DMARC report: the messages from one source address with one set of results."""

    report = models.ForeignKey(DmarcReport, on_delete=models.CASCADE, related_name="records")
    source_ip = models.GenericIPAddressField()
    count = models.PositiveIntegerField(help_text="Messages")
    disposition = models.CharField(max_length=16, blank=True, help_text="none, quarantine or reject")
    dkim_aligned = models.BooleanField(help_text="DKIM passed and aligned with the From domain")
    spf_aligned = models.BooleanField(help_text="SPF passed and aligned with the From domain")
    header_from = models.CharField(max_length=255, blank=True)
    dkim_result = models.CharField(max_length=16, blank=True, help_text="The first DKIM result, aligned or not")
    spf_result = models.CharField(max_length=16, blank=True)
    reverse_name = models.CharField(max_length=253, blank=True, help_text="The source's PTR name, when it had one")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.source_ip}: {self.count}"


class TlsReport(models.Model):
    """One SMTP TLS report's sessions towards one domain, as its summary states them."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="tls_reports")
    org_name = models.CharField(max_length=255)
    report_id = models.CharField(max_length=255)
    begin = models.DateTimeField()
    end = models.DateTimeField()
    successful_sessions = models.PositiveBigIntegerField()
    failed_sessions = models.PositiveBigIntegerField()
    authenticated = models.BooleanField(
        default=False,
        help_text="Its mail was DKIM- or SPF-aligned with its contact-info's domain; summaries count these by default",
    )
    # The mail goes with retention (messaging.retention.report_data_purge); the report stays.
    mail = models.ForeignKey(
        ReportMail, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The mail it came in"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["domain", "org_name", "report_id"], name="tls_report_once"),
        ]
        indexes = [
            # tls_summary: a domain's reports ending within the last N days.
            models.Index(fields=["domain", "end"], name="tls_report_domain_end_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.org_name} {self.report_id} about {self.domain_id}"


class TlsReportFailure(models.Model):
    """A TLS report's failed sessions of one result type (RFC 8460 §4.3), summed over its details."""

    report = models.ForeignKey(TlsReport, on_delete=models.CASCADE, related_name="failures")
    result_type = models.CharField(max_length=64)
    sessions = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["report", "result_type"], name="tls_report_failure_once"),
        ]

    def __str__(self) -> str:
        return f"{self.result_type}: {self.sessions}"
