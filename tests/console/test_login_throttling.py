"""The console's login is throttled (django-axes): repeated wrong passwords for one user, from one
address or many, lock that user out for the configured time, say so, log it, and an operator can lift it."""

import logging
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "the-right-passphrase"


@pytest.fixture
def staff(db) -> User:
    return User.objects.create_superuser("ops", password=PASSWORD)


def _log_in(client: Client, password: str, address: str = "127.0.0.1"):
    data = {"username": "ops", "password": password, "next": "/admin/"}
    return client.post("/admin/login/", data, REMOTE_ADDR=address)


def _signed_in(response) -> bool:
    return response.status_code == 302 and response["Location"] == "/admin/"


def test_20_wrong_passwords_lock_the_account_for_the_configured_time(staff, settings, caplog):
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    client = Client()
    with caplog.at_level(logging.WARNING, logger="axes"):
        statuses = [_log_in(client, f"wrong-{n}").status_code for n in range(20)]

    locked = _log_in(client, PASSWORD)

    assert statuses[: settings.AXES_FAILURE_LIMIT - 1] == [200] * (settings.AXES_FAILURE_LIMIT - 1)
    assert set(statuses[settings.AXES_FAILURE_LIMIT :]) == {429}
    assert locked.status_code == 429 and not _signed_in(locked)
    assert "Too many failed sign-ins" in locked.content.decode()
    assert "0:15:00" in locked.content.decode()
    assert "Mail service console" in locked.content.decode() and "Django administration" not in locked.content.decode()
    assert any("locking out" in record.getMessage().lower() for record in caplog.records)


def test_the_lockout_ends_after_the_cool_off_time(staff, settings):
    client = Client()
    for n in range(settings.AXES_FAILURE_LIMIT):
        _log_in(client, f"wrong-{n}")
    assert _log_in(client, PASSWORD).status_code == 429

    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - settings.AXES_COOLOFF_TIME)

    assert _signed_in(_log_in(client, PASSWORD))


def test_guesses_spread_over_addresses_lock_the_user_out_of_every_address(staff, settings):
    for address in range(1, 9):  # 8 addresses, each kept under the limit
        for n in range(settings.AXES_FAILURE_LIMIT - 1):
            _log_in(Client(), f"wrong-{address}-{n}", address=f"192.0.2.{address}")

    assert _log_in(Client(), PASSWORD, address="192.0.2.9").status_code == 429


def test_the_limit_counts_failures_from_any_mix_of_addresses(staff, settings):
    for n in range(settings.AXES_FAILURE_LIMIT - 1):
        _log_in(Client(), f"wrong-{n}", address=f"192.0.2.{n + 1}")
    assert _signed_in(_log_in(Client(), PASSWORD, address="198.51.100.1"))  # under the limit; resets the count

    for n in range(settings.AXES_FAILURE_LIMIT):
        _log_in(Client(), f"wrong-{n}", address=f"192.0.2.{n % 2 + 1}")
    for address in ("192.0.2.1", "198.51.100.1"):
        assert _log_in(Client(), PASSWORD, address=address).status_code == 429


def test_another_user_is_not_locked_out(staff, settings):
    User.objects.create_superuser("other", password=PASSWORD)
    for n in range(settings.AXES_FAILURE_LIMIT):
        _log_in(Client(), f"wrong-{n}", address="192.0.2.1")

    other = Client().post(
        "/admin/login/", {"username": "other", "password": PASSWORD, "next": "/admin/"}, REMOTE_ADDR="192.0.2.1"
    )
    assert _signed_in(other)


def test_an_operator_lifts_a_lockout_with_axes_reset_username(staff, settings):
    for n in range(settings.AXES_FAILURE_LIMIT):
        _log_in(Client(), f"wrong-{n}")
    assert _log_in(Client(), PASSWORD).status_code == 429

    call_command("axes_reset_username", "ops")

    assert _signed_in(_log_in(Client(), PASSWORD))
