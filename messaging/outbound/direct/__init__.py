"""Direct delivery (EMAIL_URL=mx://): each recipient domain's own mail servers, found in DNS.

`transport.py` (MxTransport) takes a message's recipient domains host by host: their MX hosts
(`routing.py`), the sessions each worker process keeps open between batches (`sessions.py`), the TLS
each session must have (`tls_policy.py`: DANE, else MTA-STS from `mta_sts.py`, else opportunistic),
the source address it leaves from within the warm-up caps (`sources.py`), the destination's
connection cap and rate (`destinations.py`); the TLS outcome of every session is counted for TLS-RPT
(messaging/tls_reports/counts.py).

This package sits beside the relay, below the transport factory (messaging/outbound/transports.py):
nothing here imports the relay, the factory or dispatch (pyproject.toml's outbound contract).
"""
