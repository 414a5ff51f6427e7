"""Direct delivery's source addresses (MAILSERVICE_SOURCE_ADDRESSES) and the pools domains are assigned to.

The configuration names the addresses and their EHLO names; the database holds the pools and each
address's warm-up state (`SourceAddress`). An address a pool names that is no longer configured is
left out of the pool until it is configured again."""

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings

from domains.models import Domain, SourceAddress

ALL = "all"  # the pool of a domain assigned to none: every configured address


@dataclass(frozen=True)
class Pool:
    """The addresses a domain's direct delivery may leave from, in configuration order."""

    name: str
    addresses: tuple[str, ...]
    # Their warm-up rows, read with the pool: direct delivery's lanes (threads) then need no query of their own.
    rows: tuple[SourceAddress, ...] = field(default=(), compare=False, hash=False)


def configured_addresses() -> dict[str, str]:
    """{address: its EHLO name, "" for the default}, as MAILSERVICE_SOURCE_ADDRESSES gives them."""
    return dict(settings.MAILSERVICE_SOURCE_ADDRESSES)


def domain_pools(*, domain_ids: Iterable[int]) -> dict[int, Pool]:
    """Each domain's pool, in one query; {} while no source address is configured (the system chooses)."""
    configured = configured_addresses()
    if not configured:
        return {}
    rows = {row.address: row for row in source_address_rows(configured)}
    everything = Pool(ALL, tuple(configured), tuple(rows.values()))
    pools: dict[int, Pool] = {}
    for domain in Domain.objects.filter(pk__in=set(domain_ids)).select_related("source_pool"):
        chosen = domain.source_pool
        if chosen is None:
            pools[domain.pk] = everything
        else:
            addresses = tuple(a for a in configured if a in set(chosen.addresses))
            pools[domain.pk] = Pool(chosen.name, addresses, tuple(rows[a] for a in addresses))
    return pools


def source_address_rows(addresses: Iterable[str]) -> list[SourceAddress]:
    """The warm-up rows of `addresses`, in their order, made for those that have none yet."""
    wanted = list(addresses)
    rows = {row.address: row for row in SourceAddress.objects.filter(address__in=wanted)}
    missing = [SourceAddress(address=address) for address in wanted if address not in rows]
    if missing:
        SourceAddress.objects.bulk_create(missing, ignore_conflicts=True)  # another worker may make them too
        rows = {row.address: row for row in SourceAddress.objects.filter(address__in=wanted)}
    return [rows[address] for address in wanted]
