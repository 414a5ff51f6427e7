from collections.abc import Iterable
from typing import Any

from rest_framework.negotiation import BaseContentNegotiation, DefaultContentNegotiation
from rest_framework.request import Request


class JsonOnlyNegotiation(BaseContentNegotiation):
    """The API answers in JSON whatever the Accept header says: a 406 is no status of the spec."""

    def select_parser(self, request: Request, parsers: Iterable[Any]) -> Any:
        return DefaultContentNegotiation().select_parser(request, parsers)

    def select_renderer(self, request: Request, renderers: Iterable[Any], format_suffix: str | None = None) -> Any:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type
