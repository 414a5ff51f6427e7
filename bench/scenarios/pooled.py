"""Scenario 12, PgBouncer: scenario 1 with the web servers' connections behind Debian's pgbouncer in
transaction pooling mode (DATABASE_POOLER=pgbouncer: no server-side cursors, no prepared statements),
with fewer server connections than web threads; SHOW POOLS is read every 50 ms for the peaks.
"""

import argparse
import subprocess

from bench.report import Section
from bench.scenario import Context, Scenario
from bench.scenarios import accept
from bench.stack import server_env

# A domain of its own: earlier scenarios of `bench all` pause the others (scenario 2 pauses scenario 1's).
DOMAIN = "pooled.bench.example"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    accept.add_arguments(parser)
    parser.add_argument(
        "--pool-size", type=int, default=4, help="PgBouncer's default_pool_size: server connections (default 4)"
    )


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from tests.harness import PgBouncer, PoolWatch, running

    version = subprocess.run([PgBouncer.BINARY, "--version"], capture_output=True, text=True, check=True)
    with (
        running(PgBouncer(ctx.services.database_url, pool_size=args.pool_size)) as bouncer,
        running(PoolWatch(bouncer)) as watch,
    ):
        env = server_env(DATABASE_URL=bouncer.url, DATABASE_POOLER="pgbouncer", REDIS_URL=ctx.services.redis_url)
        pooled = accept.measure(args, env, domain=DOMAIN, services=ctx.services)
    summary = (
        f"Scenario 1 with every web thread's connection behind PgBouncer in transaction pooling mode, "
        f"`default_pool_size = {args.pool_size}`; compare its rows with scenario 1's."
    )
    section = accept.section(
        pooled, args, title="13. Accept path behind PgBouncer", summary=summary, plot="pooled.png", ctx=ctx, goals=False
    )
    section.notes.append(
        f"{version.stdout.splitlines()[0]}: at most {watch.servers} server connections at once for up to "
        f"{watch.clients} client connections (SHOW POOLS every 50 ms; both gunicorn servers of the run share the pool)."
    )
    return [section]


SCENARIO = Scenario(
    name="pooled",
    help="scenario 1 behind PgBouncer in transaction pooling mode",
    add_arguments=add_arguments,
    tiny={**accept.SCENARIO.tiny, "pool_size": 2},
    run=run,
)
