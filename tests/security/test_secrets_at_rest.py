"""DKIM private keys at rest: encrypted under MAILSERVICE_ENCRYPTION_KEYS, never in a database dump,
decrypted only to sign; keys rotate with reencrypt_secrets; a missing or malformed key stops start-up."""

import os
import subprocess
import sys

import dkim
import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from domains.models import DkimKey, DkimKeyState
from domains.services import dkim_rotate, domain_create
from mailservice.encryption import UndecryptableSecret, decrypt_secret, encrypt_secret
from messaging.models import Message, Status
from messaging.outbound.dispatch import dispatch_batch
from tests.conftest import client_for
from tests.factories import ApiKeyFactory, DomainFactory, MessageFactory, _shared_dkim_key_pair, dkim_dnsfunc
from tests.harness import BIN, ROOT, child_env


def pg_dump() -> str:
    """The test database as `pg_dump` writes it (a separate connection: committed data only)."""
    db = connection.settings_dict
    env = {**os.environ, "PGPASSWORD": db["PASSWORD"] or ""}
    command = ["pg_dump", "--host", db["HOST"] or "127.0.0.1", "--port", str(db["PORT"] or 5432)]
    command += ["--username", db["USER"] or "postgres", db["NAME"]]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=120).stdout


@pytest.mark.live
@pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_dump needs PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_database_dump_holds_no_private_key_and_dispatch_still_signs(settings, tmp_path):
    settings.EMAIL_URL, settings.MAILSERVICE_OUTBOX_DIR = None, tmp_path
    domain = domain_create(name="dumped.example.com", verified=True)
    dkim_rotate(domain=domain_create(name="rotating.example.com", verified=True))

    response = client_for(ApiKeyFactory(domain=domain)).post(
        "/v1/send",
        {"from": "shop@dumped.example.com", "to": "bob@example.org", "subject": "Hi", "text": "Hello"},
        format="json",
    )

    message = Message.objects.get(public_id=response.json()["id"])  # dispatched in-process on commit
    assert message.status == Status.DELIVERED
    assert dkim.verify((tmp_path / f"{message.public_id}.eml").read_bytes(), dnsfunc=dkim_dnsfunc(domain))
    dump = pg_dump()
    assert "PRIVATE KEY" not in dump
    keys = DkimKey.objects.all()
    assert len(keys) == 3  # two domains' first keys and one pending
    for key in keys:
        assert key.private_key in dump  # what is stored is the encrypted token…
        assert decrypt_secret(key.private_key).splitlines()[1] not in dump  # …and no part of the PEM


def test_secrets_round_trip_and_a_foreign_token_is_refused(settings):
    token = encrypt_secret("secret")

    assert "secret" not in token and decrypt_secret(token) == "secret"
    settings.MAILSERVICE_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(UndecryptableSecret):
        decrypt_secret(token)


@pytest.mark.django_db
def test_reencrypt_secrets_moves_every_key_to_the_first_key_and_signing_follows(settings, tmp_path, capsys):
    settings.EMAIL_URL, settings.MAILSERVICE_OUTBOX_DIR = None, tmp_path
    old, new = settings.MAILSERVICE_ENCRYPTION_KEYS[0], Fernet.generate_key().decode()
    domains = DomainFactory.create_batch(3)
    dkim_rotate(domain=domains[0])

    settings.MAILSERVICE_ENCRYPTION_KEYS = [new, old]  # the new key first, the old one still readable
    call_command("reencrypt_secrets")

    assert "domains.DkimKey.private_key: 4 re-encrypted" in capsys.readouterr().out
    settings.MAILSERVICE_ENCRYPTION_KEYS = [new]  # the old key dropped
    plaintexts = [decrypt_secret(key.private_key) for key in DkimKey.objects.all()]
    assert plaintexts.count(_shared_dkim_key_pair()[0]) == 3 and len(plaintexts) == 4
    message = MessageFactory(domain=domains[1], next_attempt_at=timezone.now())

    assert dispatch_batch(public_id=message.public_id) == 1
    data = (tmp_path / f"{message.public_id}.eml").read_bytes()
    assert dkim.verify(data, dnsfunc=dkim_dnsfunc(domains[1]))


@pytest.mark.django_db
def test_reencrypt_secrets_reports_what_no_key_opens(settings):
    DomainFactory()
    settings.MAILSERVICE_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]  # the old key dropped too early

    with pytest.raises(CommandError, match=r"1 secret\(s\) could not be decrypted .*domains.DkimKey.private_key pk="):
        call_command("reencrypt_secrets")


@pytest.mark.django_db
def test_a_key_that_cannot_be_decrypted_defers_the_message_unsigned_and_unsent(settings, tmp_path):
    settings.EMAIL_URL, settings.MAILSERVICE_OUTBOX_DIR = None, tmp_path
    domain = DomainFactory(name="lost.example.com")
    settings.MAILSERVICE_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    message = MessageFactory(domain=domain, next_attempt_at=timezone.now())

    dispatch_batch(public_id=message.public_id)

    message.refresh_from_db()
    assert message.status == Status.ACCEPTED and "not signed, not sent" in message.last_error
    assert not list(tmp_path.iterdir())


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_existing_plaintext_keys_and_reverses():
    before, pem, public = [("domains", "0002_dkim_keys")], *_shared_dkim_key_pair()
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(before)
        legacy = executor.loader.project_state(before).apps.get_model("domains", "Domain")
        legacy.objects.create(
            name="legacy.example.com", dkim_selector="legacy", dkim_private_key=pem, dkim_public_key=public
        )
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

        key = DkimKey.objects.get(domain__name="legacy.example.com")
        assert (key.selector, key.state, key.public_key) == ("legacy", DkimKeyState.ACTIVE, public)
        assert "PRIVATE KEY" not in key.private_key and decrypt_secret(key.private_key) == pem

        executor.loader.build_graph()
        executor.migrate(before)
        restored = executor.loader.project_state(before).apps.get_model("domains", "Domain").objects.get()
        assert (restored.dkim_selector, restored.dkim_private_key) == ("legacy", pem)
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def _manage(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in child_env().items() if key not in env or env[key] is not None}
    environment.update({key: value for key, value in env.items() if value is not None})
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


@pytest.mark.live
@pytest.mark.django_db
def test_a_malformed_key_stops_start_up_without_echoing_it():
    good = Fernet.generate_key().decode()

    result = _manage("check", MAILSERVICE_ENCRYPTION_KEYS=f"{good},not-a-fernet-key")

    assert result.returncode != 0
    assert "MAILSERVICE_ENCRYPTION_KEYS: key 2 of 2 is not a Fernet key" in result.stderr
    assert "not-a-fernet-key" not in result.stderr and good not in result.stderr


@pytest.mark.live
@pytest.mark.django_db
def test_development_keeps_a_generated_key_under_var(tmp_path):
    result = _manage(
        "shell",
        "-c",
        "from mailservice.encryption import *; print(decrypt_secret(encrypt_secret('ok')))",
        DEBUG="true",
        MAILSERVICE_VAR_DIR=str(tmp_path),
        MAILSERVICE_ENCRYPTION_KEYS=None,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "ok"
    key_file = tmp_path / "encryption_key"
    assert Fernet(key_file.read_text().strip()) and oct(key_file.stat().st_mode & 0o777) == "0o600"


@pytest.mark.live
def test_a_worker_refuses_to_start_without_keys():
    env = child_env(CELERY_TASK_DEFAULT_QUEUE="never-used")
    del env["MAILSERVICE_ENCRYPTION_KEYS"]

    result = subprocess.run(
        [str(BIN / "celery"), "-A", "config", "worker", "--pool", "solo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    assert "ImproperlyConfigured: MAILSERVICE_ENCRYPTION_KEYS must be set" in result.stderr
