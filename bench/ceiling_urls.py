"""Bench-only URLconf (selected by bench/ceiling_settings.py): the framework ceiling of POST /v1/send.

The same middleware, the real key authentication and send permission, then a constant answer:
what the server stack costs before the product does any work. Never routed in production.
"""

from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mailservice.api.authentication import BearerKeyAuthentication
from mailservice.api.permissions import CanSend

CONSTANT = {"id": "x", "created_at": "2026-01-01T00:00:00Z"}


class CeilingSendView(APIView):
    authentication_classes = [BearerKeyAuthentication]
    permission_classes = [CanSend]

    def post(self, request: Request) -> Response:
        return Response(CONSTANT)


urlpatterns = [path("v1/send", CeilingSendView.as_view())]
