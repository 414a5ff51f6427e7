"""Scenario 6, submission: messages per second accepted by `manage.py run_submission_smtp`.

The real server (a subprocess on the bench database, a verified domain, STARTTLS with a certificate
made for the run, AUTH PLAIN with an API key) and its ceiling, bench.sink with the same certificate
(STARTTLS required, no AUTH, discards), get the same load: `--clients` processes, each with one
smtplib connection (TLS and, for the product, AUTH once) reused for its share of the messages, in
alternating rounds. A message counts when the server answered 250 to its DATA; for the product that
is after it is stored as an accepted message, which is checked afterwards.
"""

import argparse
import math
import smtplib
import ssl
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

from bench import plots
from bench.report import Ratio, Section, bottleneck_note
from bench.scenario import Context, Scenario
from bench.scenarios.inbound import CPU_NOTE, HEADER, Load, _merge, measured
from bench.stack import BenchError, discard_sink, server_env, serving_pid

DOMAIN = "submission.bench.example"
SENDER = f"app@{DOMAIN}"
RECIPIENT = "customer@example.org"
RAW = (
    f"From: Shop <{SENDER}>\r\nTo: <{RECIPIENT}>\r\nSubject: Your order #12345 has shipped\r\n"
    "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    + "Your order is on its way and should arrive within three working days.\r\n"
    * 12
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=3000, help="messages per server (default 3000)")
    parser.add_argument("--clients", type=int, default=4, help="client processes, one connection each (default 4)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds the messages are split over")


def _client(port: int, count: int, cafile: str, secret: str | None) -> tuple[float, float, int, int, float]:
    """(start, end, sent, refused, CPU share) of one STARTTLS connection (AUTH with `secret`) sending `count`."""
    sent = refused = 0
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.starttls(context=ssl.create_default_context(cafile=cafile))
        smtp.ehlo()
        if secret is not None:
            smtp.user, smtp.password = "apikey", secret
            smtp.auth("PLAIN", smtp.auth_plain)
        cpu, start = time.process_time(), time.time()
        for _ in range(count):
            try:
                smtp.sendmail(SENDER, [RECIPIENT], RAW.encode())
                sent += 1
            except smtplib.SMTPResponseException:
                refused += 1
        end = time.time()
    return start, end, sent, refused, (time.process_time() - cpu) / max(end - start, 1e-9)


def _load(port: int, total: int, clients: int, cafile: str, secret: str | None) -> Load:
    share = math.ceil(total / clients)
    with ProcessPoolExecutor(clients) as pool:
        futures = [
            pool.submit(_client, port, min(share, total - i * share), cafile, secret)
            for i in range(clients)
            if total > i * share
        ]
        results = [future.result() for future in futures]
    return Load(
        sent=sum(r[2] for r in results),
        errors=sum(r[3] for r in results),
        seconds=max(r[1] for r in results) - min(r[0] for r in results),
        client_cpu=[r[4] for r in results],
    )


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from apikeys.services import apikey_create
    from domains.services import domain_create
    from messaging.models import Direction, Message
    from tests.harness import self_signed_certificate, submission_smtp_server

    if args.messages < 1 or args.clients < 1 or args.rounds < 1:
        raise BenchError("submission: --messages, --clients and --rounds must be positive")
    domain = domain_create(name=DOMAIN, verified=True)
    secret = apikey_create(domain=domain, permissions=["email.send"], name="bench").secret
    ceiling, product = Load(), Load()
    per_round = max(1, args.messages // args.rounds)
    with tempfile.TemporaryDirectory() as directory:
        cert, key = (str(path) for path in self_signed_certificate(Path(directory)))
        env = server_env(
            DATABASE_URL=ctx.services.database_url,
            REDIS_URL=ctx.services.redis_url,
            MAILSERVICE_TLS_CERT_FILE=cert,
            MAILSERVICE_TLS_KEY_FILE=key,
            MAILSERVICE_INBOUND_HOST="submit.bench.example",
        )
        with discard_sink(tls=(cert, key)) as sink, submission_smtp_server(**env) as port:
            warmup = args.clients * 2
            _load(port, warmup, args.clients, cert, secret)  # connections, imports, the first queries
            pid = serving_pid(port)
            for _ in range(args.rounds):
                _merge(ceiling, measured(sink.pid, partial(_load, sink.port, per_round, args.clients, cert, None)))
                _merge(product, measured(pid, partial(_load, port, per_round, args.clients, cert, secret)))
    stored = Message.objects.filter(domain=domain, direction=Direction.SENT).count() - warmup
    if stored != product.sent:
        raise BenchError(f"submission: the server answered 250 to {product.sent} messages but stored {stored}")
    section = Section(
        title="6. Submission",
        summary=(
            f"Messages ({len(RAW):,} bytes each, one recipient) accepted by `manage.py run_submission_smtp` "
            "(STARTTLS, AUTH PLAIN with an API key once per connection; each message checked and stored as an "
            "accepted send before its 250) against a bare aiosmtpd server with the same certificate (STARTTLS, "
            f"no AUTH, discards), from {args.clients} smtplib client processes, each reusing one connection; "
            f"{per_round * args.rounds:,} messages per server in {args.rounds} alternating rounds."
        ),
        header=["server", *HEADER],
    )
    for name, load in (("ceiling: bare aiosmtpd, STARTTLS, discards", ceiling), ("run_submission_smtp", product)):
        section.rows.append([name, *load.cells()])
    section.failed_requests = ceiling.errors + product.errors
    ratio = product.rate / ceiling.rate
    section.ratios.append(Ratio("run_submission_smtp / bare aiosmtpd with TLS", ratio))
    busiest = max(ceiling.client_cpu + product.client_cpu)
    section.notes += [CPU_NOTE, bottleneck_note("The busiest client process", busiest, hint="; try more --clients.")]
    rates = {"ceiling: bare aiosmtpd + TLS": ceiling.rate, "run_submission_smtp": product.rate}
    section.plots.append(plots.rates(ctx.output / "submission.png", rates, title="6. Submission: messages per second"))
    return [section]


SCENARIO = Scenario(
    name="submission",
    help="messages per second accepted by run_submission_smtp (STARTTLS + AUTH), against bare aiosmtpd with TLS",
    add_arguments=add_arguments,
    tiny={"messages": 30, "clients": 2, "rounds": 1},
    run=run,
)
