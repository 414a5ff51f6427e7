"""A webhook URL's userinfo and query (credentials, tokens) never reach a log line or command output."""

import io
import logging

import pytest
from django.core.management import call_command

from messaging.models import MessageEvent
from tests.factories import MessageFactory
from webhooks import services
from webhooks.tasks import pump_task

pytestmark = pytest.mark.django_db

URL = "http://hookuser:s3cr3t-pass@127.0.0.1:9/hooks/in?token=q-s3cr3t&x=1"


def test_a_failed_attempt_logs_the_url_without_userinfo_or_query(domain, caplog):
    endpoint = services.endpoint_create(domain=domain, url=URL, event_types=[]).endpoint
    MessageEvent.objects.create(message=MessageFactory(domain=domain), type="delivered")

    with caplog.at_level(logging.INFO, logger="webhooks"):
        pump_task()

    [line] = [record.getMessage() for record in caplog.records if record.name == "webhooks.services"]
    assert "http://127.0.0.1:9/hooks/in" in line
    assert "s3cr3t" not in line and "hookuser" not in line and "token" not in line
    assert "s3cr3t" not in str(endpoint)  # the admin's change log records this label


def test_the_webhook_commands_print_the_url_without_userinfo_or_query(domain):
    created, deleted = io.StringIO(), io.StringIO()
    call_command("create_webhook", domain.name, URL, stdout=created)
    public_id = services.endpoint_create(domain=domain, url=URL, event_types=[]).endpoint.public_id
    call_command("delete_webhook", public_id, stdout=deleted)

    for output in (created.getvalue().splitlines()[0], deleted.getvalue()):
        assert "http://127.0.0.1:9/hooks/in" in output
        assert "s3cr3t" not in output and "hookuser" not in output
