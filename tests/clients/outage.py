"""A database outage for live client tests: a web server pointed at a port nothing listens on."""

from tests.harness import free_port


def unreachable_database_url() -> str:
    """Every request that needs the database (authentication first) answers 503 ServiceUnavailable."""
    return f"postgres://postgres@127.0.0.1:{free_port()}/unreachable"
