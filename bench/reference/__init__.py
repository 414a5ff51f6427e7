"""Fixed references for the accept and inbound scenarios, which do not move with the product.

A minimal Django project (only CommonMiddleware, no authentication, nothing of the product imported)
served by gunicorn sync workers, the configuration gunicorn documents behind a buffering proxy:

- R0, bare (`POST /r0`): one DRF view that parses the JSON body and answers a constant.
- R1, durable (`POST /r1`): R0 plus the work a send cannot skip, one INSERT of a row shaped like a
  stored message (the same columns, the body's own fields and size) committed in PostgreSQL, and one
  Redis INCR with expiry (the rate-limit counter).

`bench.reference.inbound` is the inbound one: bare aiosmtpd whose handler commits the raw message to
PostgreSQL before its 250. The tables they write are in `bench.reference.schema`.
"""
