"""Real processes for live (black-box) tests: the web server, the inbound SMTP server, Celery
workers, SMTP peers, private Redis and PostgreSQL servers, all on the test database.

Tests that use these need `transactional_db`, so what they create is committed and visible to the
child processes, which are pointed at the same test database and Redis. Every child is a
`ChildProcess` (tests/harness/process.py); the fixtures are in tests/harness/plugin.py. The shipped
nginx site is run by tests/harness/nginx.py, network namespaces (nodes apart) by tests/harness/netns.py.
"""

from tests.harness.env import FAST_DISPATCH, child_env, current_database_url
from tests.harness.process import BIN, LOG_DIR, ROOT, ChildProcess, free_port, wait_until
from tests.harness.servers import (
    WEB_COMMAND,
    CeleryWorker,
    ChildServer,
    PgBouncer,
    PoolWatch,
    PostgresCluster,
    RedisServer,
    Startable,
    WebProcess,
    answers_http,
    celery_worker,
    child_server,
    inbound_smtp_server,
    procfile_web,
    procfile_web_line,
    redis_server,
    running,
    self_signed_certificate,
    submission_smtp_server,
    web_server,
)
from tests.harness.smtp import Received, SinkBehaviour, SmtpSink, busy_greeter, serves_smtp, smtp_sink, socket_server

__all__ = [
    "BIN",
    "FAST_DISPATCH",
    "LOG_DIR",
    "ROOT",
    "WEB_COMMAND",
    "CeleryWorker",
    "ChildProcess",
    "ChildServer",
    "PgBouncer",
    "PoolWatch",
    "PostgresCluster",
    "Received",
    "RedisServer",
    "SinkBehaviour",
    "SmtpSink",
    "Startable",
    "WebProcess",
    "answers_http",
    "busy_greeter",
    "celery_worker",
    "child_env",
    "child_server",
    "current_database_url",
    "free_port",
    "inbound_smtp_server",
    "procfile_web",
    "procfile_web_line",
    "redis_server",
    "running",
    "self_signed_certificate",
    "serves_smtp",
    "smtp_sink",
    "socket_server",
    "submission_smtp_server",
    "wait_until",
    "web_server",
]
