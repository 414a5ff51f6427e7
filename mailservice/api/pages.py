"""The HTTP pages outside /v1/: the landing page, the README, the health probes and /metrics. They sit in the
API layer: they answer with its error envelope, and /metrics reads the apps (mailservice/api/scrape.py)."""

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from mailservice.api.clientip import client_ip
from mailservice.api.exceptions import error_response
from mailservice.api.scrape import exposition
from mailservice.errors import ErrorCode
from mailservice.health import OK, readiness
from mailservice.ratelimit import failure_counted, failures_wait

# Read-only pages: any other method is the API's JSON 405, never a CSRF 403.


@csrf_exempt
@require_safe
def landing(request: HttpRequest) -> HttpResponse:
    return render(request, "mailservice/landing.html")


@csrf_exempt
@require_safe
def readme(request: HttpRequest) -> HttpResponse:
    text = (settings.BASE_DIR / "README.md").read_text(encoding="utf-8")
    return HttpResponse(text, content_type="text/markdown; charset=utf-8")


@csrf_exempt
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. Touches no database, cache or broker, so an outage of one of
    them never gets healthy web processes restarted."""
    return JsonResponse({"status": "ok"})


@csrf_exempt
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 while database, migrations, cache and broker are fine, else 503 naming what failed."""
    checks = readiness()
    failed = [name for name, state in checks.items() if state != OK]
    body = {"status": "unavailable" if failed else "ok", "failed": failed, "checks": checks}
    return JsonResponse(body, status=503 if failed else 200)


@csrf_exempt
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text, only for `Authorization: Bearer $MAILSERVICE_METRICS_TOKEN` (404 while no token is set).

    Wrong tokens are counted per client address: at MAILSERVICE_METRICS_FAILURE_RATE, 429 until the window ends."""
    token = settings.MAILSERVICE_METRICS_TOKEN
    if not token:
        return error_response(request, ErrorCode.NOT_FOUND, "No such resource")
    address, rate = [client_ip(request)], settings.MAILSERVICE_METRICS_FAILURE_RATE
    wait = failures_wait(group="metrics", keys=address, rate=rate)
    if wait is not None:
        return error_response(
            request, ErrorCode.RATE_LIMITED, "Too many wrong metrics tokens", headers={"Retry-After": str(wait)}
        )
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if not (scheme.lower() == "bearer" and hmac.compare_digest(presented.encode(), f"{token}".encode())):
        failure_counted(group="metrics", keys=address, rate=rate)
        return error_response(request, ErrorCode.UNAUTHORIZED, "GET /metrics needs the metrics bearer token")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
