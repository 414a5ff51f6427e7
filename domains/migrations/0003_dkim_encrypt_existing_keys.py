"""Each domain's plaintext PEM key becomes its active DkimKey, encrypted under MAILSERVICE_ENCRYPTION_KEYS.

Run without MAILSERVICE_ENCRYPTION_KEYS in DEBUG, it encrypts with the development key in
var/encryption_key (config/settings.py); in production without it, it stops with the setting's
error before changing anything. Reversing decrypts the keys back into the domain rows.
"""

from django.db import migrations
from django.utils import timezone

from mailservice.encryption import decrypt_secret, encrypt_secret


def encrypt_into_dkim_keys(apps, schema_editor) -> None:
    Domain = apps.get_model("domains", "Domain")
    DkimKey = apps.get_model("domains", "DkimKey")
    now = timezone.now()
    DkimKey.objects.bulk_create(
        DkimKey(
            domain_id=domain.pk,
            selector=domain.dkim_selector,
            state="active",
            private_key=encrypt_secret(domain.dkim_private_key),
            public_key=domain.dkim_public_key,
            activated_at=now,
        )
        for domain in Domain.objects.exclude(dkim_private_key="").iterator()
    )
    Domain.objects.update(dkim_private_key="")


def decrypt_into_domains(apps, schema_editor) -> None:
    DkimKey = apps.get_model("domains", "DkimKey")
    Domain = apps.get_model("domains", "Domain")
    for key in DkimKey.objects.filter(state="active").iterator():
        Domain.objects.filter(pk=key.domain_id).update(
            dkim_selector=key.selector, dkim_private_key=decrypt_secret(key.private_key), dkim_public_key=key.public_key
        )
    DkimKey.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("domains", "0002_dkim_keys"),
    ]

    operations = [migrations.RunPython(encrypt_into_dkim_keys, decrypt_into_domains)]
