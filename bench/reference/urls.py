"""R0 (`POST /r0`, bare) and R1 (`POST /r1`, durable): see bench/reference/__init__.py."""

import json
import secrets
import time
from datetime import UTC, datetime
from functools import cache

import redis
from django.conf import settings
from django.db import connection
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

CONSTANT = {"id": "x", "created_at": "2026-01-01T00:00:00Z"}
RATE_PERIOD = 60  # seconds: the counter's window, as the product's per-minute rate limit

INSERT = """
INSERT INTO reference_message (
    public_id, domain_id, direction, status, from_address, "to", cc, bcc, reply_to, subject, text, html,
    is_test, attempts, last_error, message_id_header, envelope_from, envelope_recipients, created_at, updated_at
) VALUES (%s, 1, 'sent', 'accepted', %s, %s, %s, %s, %s, %s, %s, %s, false, 0, '', '', '', '[]', %s, %s)
"""


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def _mailboxes(value: object) -> str:
    """A JSON column of mailboxes from the body's string or list, as stored."""
    return json.dumps([value] if isinstance(value, str) else value or [])


class BareView(APIView):
    """R0: the JSON body parsed, a constant answered."""

    def post(self, request: Request) -> Response:
        request.data  # noqa: B018 - parsing the body is the work measured
        return Response(CONSTANT)


class DurableView(APIView):
    """R1: R0, one message-shaped row committed (autocommit), one rate-limit INCR with expiry."""

    def post(self, request: Request) -> Response:
        body, now = request.data, datetime.now(UTC)
        with connection.cursor() as cursor:
            cursor.execute(
                INSERT,
                [
                    "msg_" + secrets.token_urlsafe(12),
                    body.get("from", ""),
                    _mailboxes(body.get("to")),
                    _mailboxes(body.get("cc")),
                    _mailboxes(body.get("bcc")),
                    _mailboxes(body.get("reply_to")),
                    body.get("subject", ""),
                    body.get("text"),
                    body.get("html"),
                    now,
                    now,
                ],
            )
        pipe = _redis().pipeline(transaction=False)
        pipe.incr(key := f"reference:rate:{int(time.time()) // RATE_PERIOD}")
        pipe.expire(key, RATE_PERIOD + 1)
        pipe.execute()
        return Response(CONSTANT)


urlpatterns = [path("r0", BareView.as_view()), path("r1", DurableView.as_view())]
