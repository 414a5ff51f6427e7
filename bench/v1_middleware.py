"""What the console's middleware cost each /v1/ request before /v1/ skipped it (issue 32, item 3).

    python -m bench.v1_middleware [--requests 2000] [--rounds 3]

In this process, on the bench's own database: requests per second of `POST /v1/send` and
`GET /v1/messages/{id}` through Django's test client with the middleware chain of before (every layer
on every path) and of now (ConsoleLayers skips the console's), rounds alternating; then each console
layer's own CPU time per request, from chains around a constant view with and without it, for
an API client without cookies and for one carrying a console user's stale cookies (as in
tests/api/test_v1_middleware.py). Prints Markdown.
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import FrameType
from typing import Any

from bench.stack import (
    BenchError,
    configure_django,
    create_key,
    postgres_database,
    server_env,
    services_from_environment,
)

API_LAYERS = [
    "mailservice.api.middleware.RequestIdMiddleware",
    "mailservice.api.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "mailservice.api.middleware.RateLimitMiddleware",
    "django.middleware.common.CommonMiddleware",
]
CONSOLE_LAYERS = [
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
]
SESSION_LAYER = "django.contrib.sessions.middleware.SessionMiddleware"
NEED_SESSION = {
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
}
BEFORE = API_LAYERS + CONSOLE_LAYERS  # every layer on every path, as before issue 32
COOKIES = {"sessionid": "stale", "csrftoken": "stale!"}
BODY = {"from": "Bench <bench@bench.example.com>", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}


@dataclass(frozen=True)
class Timing:
    per_second: float  # requests per second of wall time
    cpu_us: float  # this thread's CPU per request: what a loaded machine's other processes change less


def _timed(call: Callable[[], Any], requests: int) -> Timing:
    call()  # warm
    started, cpu_started = time.perf_counter(), time.thread_time()
    for _ in range(requests):
        call()
    cpu = time.thread_time() - cpu_started
    return Timing(per_second=requests / (time.perf_counter() - started), cpu_us=cpu / requests * 1e6)


def _python_calls(call: Callable[[], Any], requests: int = 50) -> float:
    """Python function calls per request: the same on a quiet and on a loaded machine."""
    calls = 0

    def count(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        for _ in range(requests):
            call()
    finally:
        sys.setprofile(None)
    return calls / requests


def _endpoint_timings(
    key: str, *, requests: int, rounds: int
) -> tuple[dict[tuple[str, str], list[Timing]], dict[tuple[str, str], float]]:
    """Timings per (endpoint, chain), each chain measured `rounds` times, in turn; Python calls per request."""
    from django.conf import settings
    from django.test import Client, override_settings

    chains = {"before": BEFORE, "now": settings.MIDDLEWARE}
    timings: dict[tuple[str, str], list[Timing]] = {}
    calls: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for name, chain in chains.items():
            with override_settings(MIDDLEWARE=chain):
                client = Client(headers={"Authorization": f"Bearer {key}"})
                sent = client.post("/v1/send", BODY, content_type="application/json")
                if sent.status_code != 200:
                    raise BenchError(f"POST /v1/send answered {sent.status_code}: {sent.content[:300]!r}")
                message = f"/v1/messages/{sent.json()['id']}"
                send = partial(client.post, "/v1/send", BODY, content_type="application/json")
                read = partial(client.get, message)
                for label, call in (("POST /v1/send", send), ("GET /v1/messages/{id}", read)):
                    timings.setdefault((label, name), []).append(_timed(call, requests))
                    calls[label, name] = _python_calls(call)
    return timings, calls


def _chain_microseconds(chain: list[str], *, cookies: dict[str, str], requests: int) -> float:
    """CPU µs per request through `chain` around a constant JSON view (bench/ceiling_urls.py's /v1/bare)."""
    from django.core.handlers.base import BaseHandler
    from django.test import RequestFactory, override_settings

    factory = RequestFactory()
    with override_settings(MIDDLEWARE=chain, ROOT_URLCONF="bench.ceiling_urls"):
        handler = BaseHandler()
        handler.load_middleware()

        def call() -> None:
            request = factory.post("/v1/bare", BODY, content_type="application/json")
            request.COOKIES.update(cookies)
            handler.get_response(request)

        return _timed(call, requests).cpu_us


def _layer_costs(*, cookies: dict[str, str], requests: int, rounds: int) -> list[tuple[str, float]]:
    """CPU µs per request of the view alone, of the API's layers, then of each console layer alone (with
    the session layer under it for the two that need one): the least over rounds of the chain with it
    less the chain without, the least being the figure the machine's other load disturbed least."""

    def least(chain: list[str]) -> float:
        return min(_chain_microseconds(chain, cookies=cookies, requests=requests) for _ in range(rounds))

    view = least([])
    costs = [("the view alone (DRF, a constant answer)", view), ("the API's layers (kept)", least(API_LAYERS) - view)]
    for layer in CONSOLE_LAYERS:
        under = [SESSION_LAYER] if layer in NEED_SESSION else []
        costs.append((layer.rpartition(".")[2], least([*under, layer]) - (least(under) if under else view)))
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.v1_middleware", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="measurements per figure (the median is reported)")
    arguments = parser.parse_args()
    services = services_from_environment(None)
    # As the bench servers run (bench.stack.server_env), with the test client's host name allowed.
    os.environ.update(server_env(), ALLOWED_HOSTS="testserver")
    configure_django(services)
    with postgres_database(services.database_url):
        key = create_key(server_env(), domain="bench.example.com")
        timings, calls = _endpoint_timings(key, requests=arguments.requests, rounds=arguments.rounds)
        bare = _layer_costs(cookies={}, requests=arguments.requests, rounds=arguments.rounds)
        with_cookies = _layer_costs(cookies=COOKIES, requests=arguments.requests, rounds=arguments.rounds)
    print(
        "| endpoint | requests/s before → now | Django's CPU µs per request before → now "
        "| Python calls per request before → now |\n| --- | --- | --- | --- |"
    )
    for endpoint in ("POST /v1/send", "GET /v1/messages/{id}"):
        before, now = (timings[endpoint, chain] for chain in ("before", "now"))
        rates = [statistics.median(timing.per_second for timing in side) for side in (before, now)]
        cpu = [min(timing.cpu_us for timing in side) for side in (before, now)]
        print(
            f"| `{endpoint}` | {rates[0]:,.0f} → {rates[1]:,.0f} ({rates[1] / rates[0] - 1:+.0%}) "
            f"| {cpu[0]:,.0f} → {cpu[1]:,.0f} ({cpu[1] - cpu[0]:+,.0f}) "
            f"| {calls[endpoint, 'before']:,.0f} → {calls[endpoint, 'now']:,.0f} |"
        )
    print("\n| layer | CPU µs per /v1/ request, no cookies | with a console user's cookies |\n| --- | --- | --- |")
    for (name, alone), (_, cookied) in zip(bare, with_cookies, strict=True):
        print(f"| {name} | {alone:.1f} | {cookied:.1f} |")
    totals = [sum(microseconds for _, microseconds in costs[2:]) for costs in (bare, with_cookies)]
    print(f"| all the console's layers | {totals[0]:.1f} | {totals[1]:.1f} |")


if __name__ == "__main__":
    try:
        main()
    except BenchError as error:
        sys.exit(f"bench: {error}")
