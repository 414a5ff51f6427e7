from django.contrib import admin
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularSwaggerView

from mailservice.api import exceptions as errors
from mailservice.api import pages

urlpatterns = [
    path("", pages.landing, name="landing"),
    path("readme", pages.readme, name="readme"),
    # Probes: outside /v1/, so neither the API's rate limit nor its key check applies.
    path("healthz", pages.healthz, name="healthz"),
    path("readyz", pages.readyz, name="readyz"),
    path("metrics", pages.metrics_view, name="metrics"),
    path("v1/", include("mailservice.api.urls")),
    path("docs/", SpectacularSwaggerView.as_view(url_name="openapi"), name="docs"),
    path("admin/", admin.site.urls),
    # Anything else is an ApiError 404, whatever DEBUG says or the method is (a POST must not meet
    # the CSRF check first: its 403 is not an answer the API documents).
    re_path(r"^.*$", csrf_exempt(errors.not_found_view)),
]

handler400 = errors.bad_request_view
handler403 = errors.forbidden_view
handler404 = errors.not_found_view
handler500 = errors.server_error_view
