"""Typed readers for settings that come from the environment (read only in settings.py)."""

import ipaddress
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, overload
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")


@overload
def env_str(name: str) -> str | None: ...
@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name, "").strip()
    return value if value else default


def env_bool(name: str, default: bool) -> bool:
    value = env_str(name)
    if value is None:
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {value!r}")


def _env_number(name: str, default: T, parse: Callable[[str], T], what: str) -> T:
    value = env_str(name)
    if value is None:
        return default
    try:
        return parse(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, got {value!r}") from None


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _env_number(name, default, int, "an integer")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be an integer of at least {minimum}, got {value}")
    return value


def env_float(name: str, default: float) -> float:
    return _env_number(name, default, float, "a number")


# django-ratelimit's rates, as mailservice/ratelimit.py reads them: a count per second, minute, hour or day,
# or per several of them ("5/10s"; never per 0 of them).
_RATE = re.compile(r"[0-9]+/([1-9][0-9]*)?[smhd]")


def env_rate(name: str, default: str) -> str:
    """A rate like `120/m`: a limit that cannot be read is an error at start-up, never an unlimited service."""
    value = env_str(name, default)
    if not _RATE.fullmatch(value):
        raise ImproperlyConfigured(
            f"{name} must be a rate like 120/m or 5/10s (a number of requests per s, m, h or d), got {value!r}"
        )
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_str(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env_str(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _without_password(url: str) -> str:
    """The URL as an error message may show it: a password in it never reaches a log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


_URL_FORMS = {"unix": "unix:///path/to.sock"}


@overload
def env_url(name: str, schemes: tuple[str, ...]) -> str | None: ...
@overload
def env_url(name: str, schemes: tuple[str, ...], default: str) -> str: ...
def env_url(name: str, schemes: tuple[str, ...], default: str | None = None) -> str | None:
    """A URL with one of `schemes` and a host (a port, if given, a number); unset gives `default`."""
    value = env_str(name, default) if default is not None else env_str(name)
    if value is None:
        return None
    parts = urlsplit(value)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    located = bool(parts.path) if parts.scheme == "unix" else bool(parts.hostname)  # unix:///run/redis.sock
    if parts.scheme not in schemes or not located or not port_ok:
        raise ImproperlyConfigured(
            f"{name} must be a URL {' or '.join(_URL_FORMS.get(s, s + '://host') for s in schemes)},"
            f" got {_without_password(value)!r}"
        )
    return value


# A host name as EHLO gives it (RFC 5321 4.1.1.1): dot-separated labels of letters, digits and hyphens.
_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def env_host(name: str) -> str | None:
    """A host name (the EHLO name, the inbound server's name, the return-path domain); unset gives None."""
    value = env_str(name)
    if value is not None and not _HOST_NAME.fullmatch(value.removesuffix(".")):
        raise ImproperlyConfigured(f"{name} must be a host name like mail.example.com, got {value!r}")
    return value


# An address as the service writes it into an envelope: a dot-atom local part (RFC 5322 3.2.3) at a host name.
_LOCAL_PART = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")


def env_address(name: str) -> str | None:
    """A bare mail address (`reports@example.com`, no display name); unset gives None."""
    value = env_str(name)
    if value is None:
        return None
    local, at, domain = value.rpartition("@")
    if not at or not _LOCAL_PART.fullmatch(local) or len(local) > 64 or not _HOST_NAME.fullmatch(domain):
        raise ImproperlyConfigured(f"{name} must be a bare address like reports@example.com, got {value!r}")
    return value


def env_networks(name: str) -> list[str]:
    """Comma-separated IP addresses or networks (`10.0.0.0/8,::1`); one that is neither stops start-up."""
    networks = env_list(name, [])
    for entry in networks:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not an IP address or network (expected e.g. 10.0.0.0/8,::1)"
            ) from None
    return networks


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def env_host_port(name: str) -> str | None:
    """`host` or `host:port` (an IPv4 address or a host name; a port from 1 to 65535); unset gives None."""
    value = env_str(name)
    if value is None:
        return None
    host, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "53")
    if not (_HOST_NAME.fullmatch(host) or _is_ip(host)) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ImproperlyConfigured(f"{name} must be host or host:port (e.g. 127.0.0.1:53), got {value!r}")
    return value


def env_source_addresses(name: str) -> dict[str, str]:
    """`ADDR[=HELO],…`: {IPv4 or IPv6 address as Python spells it: its EHLO name, "" for the default}.

    A malformed entry, a repeated address or a HELO that is not a host name stops start-up, naming the entry."""
    addresses: dict[str, str] = {}
    for entry in env_list(name, []):
        text, _, helo = (part.strip() for part in entry.partition("="))
        try:
            address = str(ipaddress.ip_address(text.strip("[]")))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {text!r} is not an IPv4 or IPv6 address (expected ADDR[=HELO],…)"
            ) from None
        if helo and not _HOST_NAME.fullmatch(helo):
            raise ImproperlyConfigured(f"{name}: the HELO name {helo!r} of {address} is not a host name")
        if address in addresses:
            raise ImproperlyConfigured(f"{name}: {address} is given twice")
        addresses[address] = helo
    return addresses


def env_fernet_keys(name: str) -> list[str]:
    """Comma-separated Fernet keys (32 url-safe base64 bytes each); a malformed one stops start-up.

    The message names the key by position only: the value is a secret and must not reach a log.
    """
    keys = env_list(name, [])
    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: key {position} of {len(keys)} is not a Fernet key (32 url-safe base64-encoded bytes);"
                " make one with: python -c"
                ' "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
            ) from None
    return keys


def database_from_url(url: str, base_dir: Path) -> dict:
    """Django DATABASES entry for postgres://… or sqlite:///path URLs."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # sqlite:///var/db.sqlite3 is relative to the project, sqlite:////tmp/db.sqlite3 absolute.
        path = Path(unquote(parts.path[1:]))
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path if path.is_absolute() else base_dir / path),
            # Several gunicorn workers share the file. A deferred transaction that reads and then
            # writes fails at once with "database is locked" when another writer got there first
            # (scenario 5 of the benchmarks: most concurrent sends were 503s). IMMEDIATE takes the
            # write lock at BEGIN, so writers queue (up to `timeout` seconds) instead; WAL lets
            # readers go on while one writes.
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20, "init_command": "PRAGMA journal_mode=WAL"},
        }
    if parts.scheme in {"postgres", "postgresql"}:
        # A database that goes silent (a partition: no reset, no answer) costs a request seconds and a 503, not
        # TCP's retransmissions (a connect gives up after about 2 minutes, a send after about 15): libpq gives up a
        # connect after connect_timeout seconds and a connection whose sends go unacknowledged after
        # tcp_user_timeout milliseconds (bench/nodes.py's node cut off from its database). The URL's values win.
        options: dict[str, object] = {"connect_timeout": "5", "tcp_user_timeout": "10000"}
        options |= {key: values[-1] for key, values in parse_qs(parts.query).items()}
        if "prepare_threshold" in options:  # ?prepare_threshold=none behind a pooler without prepared statements
            threshold = str(options["prepare_threshold"])
            options["prepare_threshold"] = None if threshold.lower() in {"", "none", "off"} else int(threshold)
        return {
            "ENGINE": "mailservice.postgresql",  # Django's, with a health check without a round trip
            "NAME": unquote(parts.path.lstrip("/")) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": options,
        }
    raise ImproperlyConfigured(f"DATABASE_URL scheme {parts.scheme!r} is not supported (use postgres:// or sqlite:///)")


POOLERS = ("none", "pgbouncer")
REDIS_SCHEMES = ("redis", "rediss", "unix")
BROKER_SCHEMES = (*REDIS_SCHEMES, "amqp", "amqps")  # what kombu reaches as Celery's broker
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def database_behind_pooler(database: dict, pooler: str) -> dict:
    """`database` (a DATABASES entry) as it must be behind `pooler` ("none" or "pgbouncer", from DATABASE_POOLER).

    Behind a transaction-pooling PgBouncer one connection is a different server session from one transaction
    to the next: no server-side cursors (QuerySet.iterator() opens one outside a transaction), and no prepared
    statements unless the URL asks for them (PgBouncer 1.21+ with max_prepared_statements keeps them; Debian
    12's 1.18 does not)."""
    if pooler not in POOLERS:
        raise ImproperlyConfigured(f"DATABASE_POOLER must be {' or '.join(POOLERS)}, got {pooler!r}")
    if pooler == "none" or not database["ENGINE"].endswith("postgresql"):
        return database
    options = {"prepare_threshold": None, **database["OPTIONS"]}
    return {**database, "DISABLE_SERVER_SIDE_CURSORS": True, "OPTIONS": options}
