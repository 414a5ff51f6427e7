"""Bench-only settings of the accept scenario's ceiling server: the product's settings with
bench.ceiling_urls as the URLconf, so the ceiling runs on the same server stack (gunicorn,
middleware, database and Redis) as the send path it is compared with."""

from config.settings import *  # noqa: F403 - the product's settings, one of them replaced

ROOT_URLCONF = "bench.ceiling_urls"
