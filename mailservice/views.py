"""The pages outside the API and the console: the landing page and the README it links."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

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
