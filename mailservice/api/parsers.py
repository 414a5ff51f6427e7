"""The API's JSON parser: DRF's, with nesting too deep to decode answered as invalid JSON."""

from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser


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
    """BoundedJSONParser for POST /v1/send/batch, reading past one send's 4 MiB.

    DRF reads a JSONParser's body through Django's HttpRequest.body, which refuses anything over
    DATA_UPLOAD_MAX_MEMORY_SIZE; this parser is no JSONParser, so DRF hands it the request's own
    stream instead, which the web server and RateLimitMiddleware have already held to
    MAILSERVICE_BATCH_MAX_BYTES (mailservice.api.middleware.max_body_bytes)."""

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        return BoundedJSONParser().parse(stream, media_type, parser_context)
