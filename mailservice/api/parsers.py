"""The API's JSON parser: DRF's, with nesting too deep to decode answered as invalid JSON."""

from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class BoundedJSONParser(JSONParser):
    """Python's decoder recurses once per nesting level and raises RecursionError (not ValueError,
    which DRF turns into a 400) past the interpreter's limit: `[[[[…]]]]` 100 000 deep was a 500
    with two logged tracebacks. No valid request nests deeper than 3 levels."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
