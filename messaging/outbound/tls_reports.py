"""TLS-RPT (RFC 8460): the outcome of each direct-delivery TLS session, counted for the daily reports."""

import logging

logger = logging.getLogger(__name__)


# replaced at merge by the TLS-RPT module
def record_tls_outcome(
    *,
    policy_domain: str,
    policy_type: str,
    policy_strings: list[str],
    mx_host: str,
    receiving_ip: str,
    result_type: str = "",
) -> None:
    logger.debug("TLS outcome %s %s %s [%s]: %s", policy_domain, policy_type, mx_host, receiving_ip, result_type)
