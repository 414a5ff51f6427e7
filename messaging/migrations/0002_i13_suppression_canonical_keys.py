"""Re-key suppressions under `Address.key` (NFKC case-folded local part, IDNA 2008 A-label domain).

Entries used to be stored lower-cased with the domain as typed (`zoe@bücher.example`); dispatch now
compares recipients under the canonical key, so an entry left in the old form would stop applying.
An entry whose key is already listed for its domain is a duplicate and is dropped; an entry that no
longer parses is kept as it is (nothing can be sent to it any more)."""

from django.db import migrations, models

from mailservice.mailbox import InvalidAddress, parse_address


def rekey(apps, schema_editor) -> None:
    Suppression = apps.get_model("messaging", "Suppression")
    for entry in Suppression.objects.exclude(address__regex=r"^[a-z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-z0-9.-]+$").iterator():
        try:
            key = parse_address(entry.address).key
        except InvalidAddress:
            continue
        if key == entry.address:
            continue
        if Suppression.objects.filter(domain_id=entry.domain_id, address=key).exists():
            entry.delete()
        else:
            Suppression.objects.filter(pk=entry.pk).update(address=key)


class Migration(migrations.Migration):
    dependencies = [("messaging", "0001_initial")]

    operations = [
        migrations.AlterField(
            model_name="suppression",
            name="address",
            field=models.CharField(
                help_text="The address as suppressions compare it: case-folded local part, A-label domain",
                max_length=320,
            ),
        ),
        migrations.RunPython(rekey, migrations.RunPython.noop),
    ]
