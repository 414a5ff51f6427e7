"""Start-up and operator errors as one line: a bad setting or an unreachable database is the operator's to
fix, and a 20-to-90-line traceback buried the one line that says what (a bad EMAIL_URL printed 84).

`--traceback` on the command line shows the traceback as before (`manage.py check --traceback` for a setting
a server or worker refused). DEBUG does not: under `make run`'s DEBUG=true a bad setting is one line too.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import ImproperlyConfigured
from django.db import InterfaceError, OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError

# gunicorn's arbiter stops (instead of restarting the worker forever) when a worker exits with this status.
WORKER_BOOT_ERROR = 3
OPERATOR_ERRORS = (ImproperlyConfigured, OperationalError, InterfaceError, RedisConnectionError)


def _verbose() -> bool:
    return "--traceback" in sys.argv


def _one_line(program: str, exc: BaseException) -> str:
    first_line = next(iter(str(exc).strip().splitlines()), "")
    return f"{program}: {type(exc).__name__}: {first_line}"


@contextmanager
def one_line_errors(program: str, *, status: int = 1) -> Iterator[None]:
    """Run the block; an OPERATOR_ERRORS exception prints `program: Kind: first line` to stderr and exits `status`."""
    try:
        yield
    except OPERATOR_ERRORS as exc:
        if _verbose():
            raise
        print(_one_line(program, exc), file=sys.stderr)
        raise SystemExit(status) from None
