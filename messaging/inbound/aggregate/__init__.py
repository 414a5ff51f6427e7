"""DMARC aggregate reports (RFC 7489 appendix C, RFC 9990) and SMTP TLS reports (RFC 8460) read back.

Receivers send them to `dmarc-reports@` and `tls-reports@` the return-path domain. Every report is
untrusted: `unpack.py` opens its container (plain, gzip or zip) without expanding past
MAILSERVICE_REPORT_MAX_BYTES, `dmarc.py` and `tlsrpt.py` read the document into value objects (no
DTD, so no entity is expanded or fetched; every date, address and count checked), and `services.py`
stores them per domain, reporter, day and source. Anything refused is raised as ReportRefused with
a one-line reason, which the stored mail keeps.
"""


class ReportRefused(Exception):
    """A report that cannot be read or stored as a report; the message is the reason operators see."""
