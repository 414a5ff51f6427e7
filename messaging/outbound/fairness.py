"""Fair dispatch: each claimed batch is shared between the domains that have mail queued, in turn.

A domain with a backlog of any size takes at most its share of a batch while other domains have
mail due, so another domain's message waits for a batch or two, never for the backlog. The turn
is a shared cursor (the id of the last domain served, in the cache: Redis for a fleet of workers)
and each batch serves the domains after it, wrapping round: round-robin across every worker
process and host. A batch is split between the domains it serves by their `dispatch_weight`
(at least one message each), so with more domains queued than a batch holds, a domain of
weight 2 gets two messages a turn where one of weight 1 gets one. What a domain's share leaves
unused goes to the domains served in the same batch, so a lone backlog still fills whole batches,
and what concurrent claimers leave (they skip each other's locked rows) is filled oldest first.

The domains with queued messages are found by a skip scan of the partial index on accepted
messages by domain (`message_pending_domain_idx`): one index descent per domain, whatever the
backlog. The claim itself stays the conditional UPDATE of messaging/outbound/dispatch.py.
"""

import logging

from django.core.cache import cache
from django.db import connection
from django.db.models import QuerySet
from redis.exceptions import RedisError

from domains.models import Domain
from messaging.models import Message, Status

logger = logging.getLogger(__name__)

CURSOR_KEY = "dispatch:fair-cursor"
CURSOR_TTL = 24 * 3600


def _pending_domains(*, after: int, limit: int) -> list[int]:
    """Up to `limit` ids of domains with accepted messages, in id order after `after` (a skip scan)."""
    table = Message._meta.db_table
    # Status.ACCEPTED is written as a literal so the planner matches the partial index; only the
    # model's own identifiers and that constant are interpolated, the bounds are parameters.
    accepted = f"'{Status.ACCEPTED.value}'"
    # ORDER BY (domain_id, next_attempt_at) is the partial index's own order: the planner takes it
    # rather than the foreign key's index, which would step over every delivered row of a domain.
    first = f'SELECT "domain_id" FROM "{table}" WHERE "status" = {accepted} AND "domain_id" > %s'  # noqa: S608
    step = (
        f'SELECT m."domain_id" FROM "{table}" m '  # noqa: S608
        f'WHERE m."status" = {accepted} AND m."domain_id" > pending.domain_id'
    )
    order = '"domain_id", "next_attempt_at" LIMIT 1'
    sql = (
        "WITH RECURSIVE pending (domain_id, n) AS ("  # noqa: S608
        f"SELECT ({first} ORDER BY {order}), 1 "
        "UNION ALL "
        f"SELECT ({step} ORDER BY m.{order}), pending.n + 1 "
        "FROM pending WHERE pending.domain_id IS NOT NULL AND pending.n < %s) "
        "SELECT domain_id FROM pending WHERE domain_id IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [after, limit])
        return [row[0] for row in cursor.fetchall()]


def _turn_order(*, limit: int) -> list[int]:
    """The domains whose turn it is: those after the shared cursor, then from the start (wrapping round)."""
    try:
        cursor = int(cache.get(CURSOR_KEY) or 0)
    except RedisError as exc:
        logger.warning("dispatch: the fair-turn cursor is unavailable, starting from the first domain: %s", exc)
        cursor = 0
    order = _pending_domains(after=cursor, limit=limit)
    if len(order) < limit and cursor:
        order += [pk for pk in _pending_domains(after=0, limit=limit - len(order)) if pk <= cursor]
    return order


def _shares(weights: list[tuple[int, int]], *, limit: int) -> list[tuple[int, int]]:
    """(domain id, messages) for the domains a batch of `limit` serves, in turn order: split by weight, one at least."""
    total = sum(weight for _, weight in weights)
    shares: list[tuple[int, int]] = []
    left = limit
    for domain_id, weight in weights:
        if left <= 0:
            break
        share = min(left, max(1, round(limit * weight / total)))
        shares.append((domain_id, share))
        left -= share
    return shares


def fair_claim_ids(due: QuerySet[Message], *, limit: int) -> list[int]:
    """Ids of up to `limit` due messages, locked (FOR UPDATE SKIP LOCKED), shared between domains in turn.

    Runs inside the claim's transaction; `due` is the claim's filter of due messages."""
    if limit <= 0:
        return []
    order = _turn_order(limit=limit)
    active = dict(Domain.objects.filter(pk__in=order, sending_paused=False).values_list("pk", "dispatch_weight"))
    shares = _shares([(pk, active[pk]) for pk in order if pk in active], limit=limit)
    ids: list[int] = []
    filled: list[int] = []  # domains that took their whole share: they may have more
    for domain_id, share in shares:
        taken = _lock_due(due, domain_id=domain_id, count=share, taken=[])
        ids += taken
        if len(taken) == share:
            filled.append(domain_id)
    for domain_id in filled:  # what the others' shares left unused
        if len(ids) >= limit:
            break
        ids += _lock_due(due, domain_id=domain_id, count=limit - len(ids), taken=ids)
    if len(ids) < limit:
        # Concurrent claimers start from the same turn and skip each other's locked rows: what is
        # left goes oldest first, so no claimer comes back empty while anything is due.
        rest = due.exclude(pk__in=ids).order_by("next_attempt_at").select_for_update(of=("self",), skip_locked=True)
        ids += rest.values_list("pk", flat=True)[: limit - len(ids)]
    if shares:
        try:
            cache.set(CURSOR_KEY, shares[-1][0], CURSOR_TTL)
        except RedisError as exc:
            logger.warning("dispatch: the fair-turn cursor was not saved: %s", exc)
    return ids


def _lock_due(due: QuerySet[Message], *, domain_id: int, count: int, taken: list[int]) -> list[int]:
    """Lock the domain's `count` oldest due messages that no concurrent claimer holds (and not in `taken`)."""
    mine = due.filter(domain_id=domain_id).exclude(pk__in=taken).order_by("next_attempt_at")
    return list(mine.select_for_update(of=("self",), skip_locked=True).values_list("pk", flat=True)[:count])
