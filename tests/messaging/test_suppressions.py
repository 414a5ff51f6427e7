"""The suppression list: `manage.py suppressions`, and sends to suppressed addresses."""

import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from messaging.models import Suppression, SuppressionReason
from messaging.suppressions import suppression_add
from tests.factories import MessageFactory
from tests.harness import ROOT, child_env


def run(*args: str) -> str:
    out = StringIO()
    call_command("suppressions", *args, stdout=out)
    return out.getvalue()


def test_add_list_remove(domain):
    assert run("add", "acme.example.com", "Someone <Someone@Example.org>") == (
        "Suppressed someone@example.org for acme.example.com\n"
    )
    assert run("add", "acme.example.com", "someone@example.org") == (
        "Already suppressed (manual): someone@example.org for acme.example.com\n"
    )
    listed = run("list", "ACME.example.com")
    assert listed.startswith("someone@example.org\tmanual\t") and listed.count("\n") == 1

    assert run("remove", "acme.example.com", "SOMEONE@example.org") == (
        "Removed someone@example.org from the suppressions of acme.example.com\n"
    )
    assert run("list", "acme.example.com") == ""


def test_an_automatic_entry_is_listed_with_its_reason_and_source(domain):
    message = MessageFactory(domain=domain)
    suppression_add(domain=domain, address="gone@example.org", reason=SuppressionReason.BOUNCE, source_message=message)
    assert run("list", "acme.example.com").split("\t")[::3] == ["gone@example.org", message.public_id + "\n"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("add", "acme.example.com"), "add needs an address: suppressions add DOMAIN ADDRESS"),
        (("remove", "acme.example.com"), "remove needs an address: suppressions remove DOMAIN ADDRESS"),
        (("list", "acme.example.com", "a@example.org"), "list takes no address"),
        (("add", "nowhere.example", "a@example.org"), "No domain named nowhere.example"),
        (("add", "acme.example.com", "not an address"), "'not an address' is not an email address"),
        (
            ("remove", "acme.example.com", "never@example.org"),
            "never@example.org is not suppressed for acme.example.com",
        ),
    ],
)
def test_bad_input_is_a_one_line_error(domain, args, error):
    with pytest.raises(CommandError) as raised:
        run(*args)
    assert str(raised.value) == error
    assert not Suppression.objects.exists()


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_bad_input_exits_non_zero_without_a_traceback(domain):
    result = subprocess.run(
        [sys.executable, "manage.py", "suppressions", "remove", "acme.example.com", "x@example.org"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr.strip()) == (
        1,
        "CommandError: x@example.org is not suppressed for acme.example.com",
    )
    unknown = subprocess.run(
        [sys.executable, "manage.py", "suppressions", "purge", "acme.example.com"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode == 2 and "invalid choice: 'purge'" in unknown.stderr


def test_a_send_to_a_suppressed_address_is_still_accepted(domain, api):
    suppression_add(domain=domain, address="gone@example.org", reason=SuppressionReason.BOUNCE)
    response = api.post(
        "/v1/send",
        {"from": "a@acme.example.com", "to": "Gone <gone@example.org>", "subject": "Hi", "text": "Hello"},
        format="json",
    )
    assert response.status_code == 200, response.content
