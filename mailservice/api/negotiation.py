from typing import Any

from rest_framework.negotiation import BaseContentNegotiation, DefaultContentNegotiation
from rest_framework.request import Request


class JsonOnlyNegotiation(BaseContentNegotiation):
    """The API answers in JSON whatever the Accept header says: a 406 is no status of the spec."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return DefaultContentNegotiation().select_parser(request, parsers)

    def select_renderer(self, request: Request, renderers: list[Any], format_suffix: str | None = None) -> Any:
        return renderers[0], renderers[0].media_type
