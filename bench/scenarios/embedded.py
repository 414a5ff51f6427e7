"""Scenario 5, the embedded default: scenario 1 on the zero-setup mode a first run gets.

SQLite file, no Redis (local-memory cache, so the rate limit counts per worker), no broker
(dispatch would run in-process), DEBUG off, served by gunicorn with the same workers.
"""

import argparse
import tempfile

from bench.report import Section
from bench.scenario import Context, Scenario
from bench.scenarios import accept
from bench.stack import migrate, server_env


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    with tempfile.TemporaryDirectory(prefix="bench-embedded-") as var_dir:
        env = server_env(
            DATABASE_URL=f"sqlite:///{var_dir}/mailservice.sqlite3",
            MAILSERVICE_VAR_DIR=var_dir,
            REDIS_URL="",
            CELERY_BROKER_URL="",
        )
        migrate(env)
        embedded = accept.measure(args, env, domain=accept.DOMAIN, services=ctx.services)
    summary = (
        "Scenario 1 on the zero-setup mode: one SQLite file, no Redis, no broker, DEBUG off, "
        "gunicorn with the same workers; the views on the product's stack run on the same SQLite stack, the "
        "references R0 and R1 are scenario 1's (PostgreSQL and Redis)."
    )
    return [
        accept.section(
            embedded,
            args,
            title="5. Embedded default (SQLite)",
            summary=summary,
            plot="embedded.png",
            ctx=ctx,
            goals=False,  # the embedded mode also dispatches in the web process: the goals are the production stack's
        )
    ]


SCENARIO = Scenario(
    name="embedded",
    help="scenario 1 on the zero-setup mode (SQLite, no Redis)",
    add_arguments=accept.add_arguments,
    tiny=accept.SCENARIO.tiny,
    run=run,
)
