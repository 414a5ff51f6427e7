"""The API's JSON parser: DRF's, with nesting too deep to decode answered as invalid JSON."""

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.utils import json

_READ_SIZE = 1024 * 1024


class BoundedJSONParser(JSONParser):
    """Python's decoder recurses once per nesting level and raises RecursionError (not ValueError,
    which DRF turns into a 400) past the interpreter's limit: `[[[[…]]]]` 100 000 deep was a 500
    with two logged tracebacks. No valid request nests deeper than 3 levels."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None


class BatchJSONParser(BaseParser):
    """BoundedJSONParser for POST /v1/send/batch, reading past one send's 4 MiB, with one copy of the body at a time.

    DRF reads a JSONParser's body through Django's HttpRequest.body, which refuses anything over
    DATA_UPLOAD_MAX_MEMORY_SIZE; this parser is no JSONParser, so DRF hands it the request's own
    stream instead, which the web server and RateLimitMiddleware hold to MAILSERVICE_BATCH_MAX_BYTES
    (mailservice.api.middleware.max_body_bytes). DRF's decoding reader held the bytes, a joined copy
    of them and the text at once; here the bytes are let go before the text is parsed (a 40 MiB
    batch grew the web worker by 130 MiB before)."""

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        body = bytearray()
        while chunk := stream.read(_READ_SIZE):
            body += chunk
        try:
            text = body.decode((parser_context or {}).get("encoding", settings.DEFAULT_CHARSET))
        except UnicodeDecodeError:
            raise ParseError("JSON parse error - the body is not UTF-8") from None
        del body
        try:
            return json.loads(text, parse_constant=json.strict_constant)
        except ValueError as error:
            raise ParseError(f"JSON parse error - {error}") from None
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
