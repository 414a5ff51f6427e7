"""Bench-only URLconf (selected by bench/ceiling_settings.py): the two framework ceilings of POST /v1/send.

Both run behind the same middleware as the product (rate limit counter in Redis included) and answer
a constant: `/v1/send` after the real key authentication and send permission (the authenticated
ceiling), `/v1/bare` with neither (the bare framework ceiling: what Django, DRF and the server stack
cost before the product does any work). Never routed in production.
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


class BareCeilingView(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    def post(self, request: Request) -> Response:
        return Response(CONSTANT)


urlpatterns = [path("v1/send", CeilingSendView.as_view()), path("v1/bare", BareCeilingView.as_view())]
