"""The inbound server's fast path for MAIL FROM / RCPT TO addresses yields what aiosmtpd's own parser does."""

import random
from collections.abc import Callable

import pytest
from aiosmtpd.smtp import SMTP

from messaging.inbound.server import InboundSMTP

ADDRESSES = [
    "<support@inbound.example>",
    "<Support.Team@Inbound.Example> SIZE=1154 BODY=8BITMIME",
    "<bounces+abc123.tag@rp.example>",
    "<a!#$%&'*+/=?^_`{|}~-z@example.com>",
    "<x@localhost>",
    "<>",
    "<a..b@example.com>",
    "<.a@example.com>",
    "<a.@example.com>",
    '<"quoted local"@example.com>',
    "<a@[192.0.2.1]>",
    "<a@example.com.>",
    "<a@-example.com>",
    "<a@exa_mple.com>",
    "<a@b@example.com>",
    "<a@example.com",
    "<a (comment) @example.com>",
    "<@relay.example:a@example.com>",
    "<pelé@exemple.fr>",
    "<a@example.com>trailing",
    "<a@example.com>  \t SIZE=1",
    "<a@example.com> (comment) SIZE=1",
    "<a@example.com>\tSIZE=1",
    "a@example.com",
    " <a@example.com>",
    "<a\x00@example.com>",
]


def _outcome(parse: Callable[[InboundSMTP, str], object], server: InboundSMTP, arg: str) -> object:
    try:
        return parse(server, arg)
    except (
        AttributeError,
        IndexError,
    ) as exc:  # the email package's parser crashes on a few inputs; so must the fast path
        return type(exc)


def _parse_both(arg: str, local_part_limit: int) -> tuple[object, object]:
    server = object.__new__(InboundSMTP)  # _getaddr reads nothing but local_part_limit
    server.local_part_limit = local_part_limit
    return _outcome(InboundSMTP._getaddr, server, arg), _outcome(SMTP._getaddr, server, arg)


@pytest.mark.parametrize("arg", ADDRESSES)
@pytest.mark.parametrize("local_part_limit", [0, 5, 64])
def test_an_address_parses_as_aiosmtpd_parses_it(arg, local_part_limit):
    fast, reference = _parse_both(arg, local_part_limit)
    assert fast == reference


def test_random_addresses_parse_as_aiosmtpd_parses_them():
    awkward = 'ab.@<>-_+"[] \t\n()é\\:='
    atext_mostly = "aab.-_+=é"
    rng = random.Random(19)

    def text(length: int, alphabet: str = awkward) -> str:
        return "".join(rng.choice(alphabet) for _ in range(length))

    for _ in range(5000):
        # Half near the fast path's form (`<x@y>` and a tail), half anything.
        if rng.random() < 0.5:
            local, domain = text(rng.randint(0, 6), atext_mostly), text(rng.randint(0, 6), "aab.-_")
            arg = f"<{local}@{domain}>{text(rng.randint(0, 4))}"
        else:
            arg = "<" + text(rng.randint(1, 12)) + rng.choice([">", "> X=1", ""])
        fast, reference = _parse_both(arg, 4)
        assert fast == reference, arg
