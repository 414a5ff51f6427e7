"""Where a received message's recipient goes: the route of each recipient address, decided by the
address alone (a VERP return path, a report mailbox, a malformed one) or else by its domain.

Four kinds of recipient are accepted:
- an address on a verified domain: the mail is stored as a `received` message of that domain;
- the VERP return path `bounces+<message id>.<tag>@<return-path domain>` (messaging.verp): the
  mail is a bounce or a complaint about that sent message;
- `dmarc-reports@` and `tls-reports@` the return-path domain: DMARC aggregate and SMTP TLS reports,
  stored per domain (messaging/inbound/aggregate/);
- any other address at the return-path domain (e.g. the address registered with a provider's
  feedback loop): a report matched to a sent message by the Message-ID it quotes.
Everything else is refused at RCPT, so the server never relays.
"""

from dataclasses import dataclass
from enum import StrEnum

from django.conf import settings

from domains.models import Domain
from mailservice.mailbox import InvalidAddress, canonical_domain
from messaging.models import (
    AggregateKind,
)
from messaging.readiness.dns_checks import REPORT_MAILBOX, TLS_REPORT_MAILBOX
from messaging.verp import VERP_PREFIX, VerpId, verp_parse

NO_VERP = VerpId("", signed=False)


class RouteKind(StrEnum):
    RECEIVED = "received"
    REPORT = "report"
    AGGREGATE = "aggregate"  # a DMARC aggregate or SMTP TLS report
    REFUSED = "refused"


_AGGREGATE_MAILBOXES = {REPORT_MAILBOX: AggregateKind.DMARC, TLS_REPORT_MAILBOX: AggregateKind.TLS}


@dataclass(frozen=True)
class Route:
    kind: RouteKind
    domain: Domain | None = None  # the receiving domain (RECEIVED)
    verp: VerpId = NO_VERP  # the message a VERP address names (REPORT)
    aggregate: AggregateKind | None = None  # which aggregate report (AGGREGATE)


def address_split(address: str) -> tuple[str, str]:
    """(local part, canonical domain); the domain is '' when it is not a valid domain name."""
    local, _, domain = address.strip().strip("<>").rpartition("@")
    try:
        return local, canonical_domain(domain, trailing_dot=True)
    except InvalidAddress:
        return local, ""


def return_path_domain() -> str:
    configured = settings.MAILSERVICE_RETURN_PATH_DOMAIN
    return canonical_domain(configured, trailing_dot=True) if configured else ""


def route_by_address(local: str, domain_name: str) -> Route | None:
    """The route the address alone decides (malformed, or a VERP return path); None when its domain decides."""
    if not local or not domain_name:
        return Route(RouteKind.REFUSED)
    if domain_name != return_path_domain():
        return None
    tag, plus, suffix = local.lower().partition("+")
    if tag == VERP_PREFIX:
        return Route(RouteKind.REPORT, verp=verp_parse(suffix) if plus else NO_VERP)
    if local.lower() in _AGGREGATE_MAILBOXES:
        return Route(RouteKind.AGGREGATE, aggregate=_AGGREGATE_MAILBOXES[local.lower()])
    return None


def route_off_verified_domains(domain_name: str) -> Route:
    """The route of an address whose domain is not a verified domain."""
    return Route(RouteKind.REPORT) if domain_name == return_path_domain() else Route(RouteKind.REFUSED)


def recipient_route(*, address: str) -> Route:
    local, domain_name = address_split(address)
    route = route_by_address(local, domain_name)
    if route is not None:
        return route
    domain = Domain.objects.filter(name=domain_name, verified=True).first()
    if domain is not None:
        return Route(RouteKind.RECEIVED, domain=domain)
    return route_off_verified_domains(domain_name)
