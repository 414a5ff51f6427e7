"""TLS-RPT (RFC 8460), the reports this service sends about the TLS of its own direct delivery, in one
family: `counts.py` counts each SMTP session's TLS outcome (direct delivery's TLS policy and lanes
record through it) and builds the day's report per policy domain; `sending.py` sends the reports to
the `rua` of each domain's `_smtp._tls` record (`manage.py send_tls_reports`, the daily beat task).

The aggregate reports other services send to us (DMARC and TLS-RPT) are read by the inbound server:
messaging/inbound/aggregate/.
"""
