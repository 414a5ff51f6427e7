"""Which receivers' replies are greylisting: a first delivery from an unknown (client, sender, recipient)
triplet deferred until a delay has passed (RFC 6647). A greylisted message waits the greylist delay
(MAILSERVICE_GREYLIST_DELAY) on its own: greylisting is no "slow down" and no reason to hold the
destination's other messages (messaging/outbound/domain_holds.py), and its first one costs no attempt
(messaging/outbound/outcomes.py).

A 4xx reply is greylisting when its text (the first TEXT_LIMIT characters) names it, or when a
450/451 with no enhanced status or `4.7.1` asks to try again later. Sources (read 2026-12):
- postgrey(8) (Debian's postgrey): `--greylist-text` defaults to "Greylisted" and a help URL,
  `--greylist-action` to DEFER_IF_PERMIT, `--delay` to 300 s; Postfix answers
  "450 4.2.0 <rcpt>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/…".
- milter-greylist (http://hcpnet.free.fr/milter-greylist/): "451 4.7.1 Greylisting in action, please
  come back later".
- greyfix (http://www.kim-minh.com/pub/greyfix/): "450 4.7.1 … Greylisted by greyfix 0.4.0, try again
  in 30 seconds".
- rspamd's greylisting module (https://rspamd.com/doc/modules/greylisting.html): a soft reject, which
  its Postfix milter answers "451 4.7.1 Try again later".
- Exim's DbLessGreyListing ACL (https://wiki.exim.org/DbLessGreyListingC): "Greylisting in progress,
  please try again later".
- OpenBSD spamd(8) in greylisting mode: "451 Temporary failure, please try again later.".
Postfix's own rate limits also answer "450 4.7.1" ("Error: too much mail from …"): they name neither,
so they stay a slow-down (messaging/outbound/provider_rules.py).

The delay that worked is learned per recipient domain (`greylist_delay`, `delay_worked`): once a greylisted
message is delivered, the time from its first greylisting to its delivery is what that domain's next
greylisted messages wait, at least MAILSERVICE_GREYLIST_DELAY and at most LEARNED_MAX_FACTOR times it. A
receiver whose delay is longer than the default (it greylists the retry again) so costs its next messages
one wait, not two. Shared state: Django's cache (Redis with REDIS_URL, so the fleet learns once), kept
LEARNED_DAYS; lost, the default applies again.
"""

from django.conf import settings
from django.core.cache import cache

from messaging.outbound.envelope import Reply

TEXT_LIMIT = 500
_NAMES = ("greylist", "graylist", "grey-list", "gray-list")
_LATER = ("try again later", "come back later")
# With these statuses (or none), "try again later" is how greylisting implementations word it.
_LATER_STATUSES = frozenset({"", "4.7.1"})


def is_greylisting(reply: Reply) -> bool:
    """Whether a receiver's `reply` greylists the message (see the sources above)."""
    if not 400 <= reply.code < 500:
        return False
    text = reply.text[:TEXT_LIMIT].lower()
    if any(name in text for name in _NAMES):
        return True
    return reply.code in (450, 451) and reply.enhanced_status in _LATER_STATUSES and any(w in text for w in _LATER)


LEARNED_MAX_FACTOR = 4  # a learned delay is at most this many times MAILSERVICE_GREYLIST_DELAY
LEARNED_DAYS = 30
_KEY = "greylist:delay:{}"


def greylist_delay(domain: str) -> float:
    """Seconds a message greylisted by `domain`'s receiver waits: what worked for it last, else the default."""
    learned = cache.get(_KEY.format(domain.lower()))
    return float(learned) if learned is not None else float(settings.MAILSERVICE_GREYLIST_DELAY)


def delay_worked(domain: str, seconds: float) -> None:
    """A message greylisted by `domain`'s receiver was delivered `seconds` after its first greylisting."""
    default = settings.MAILSERVICE_GREYLIST_DELAY
    bounded = min(max(seconds, default), LEARNED_MAX_FACTOR * default)
    cache.set(_KEY.format(domain.lower()), bounded, timeout=LEARNED_DAYS * 86400)
