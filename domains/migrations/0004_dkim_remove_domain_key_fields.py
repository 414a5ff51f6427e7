# The plaintext key columns, emptied into DkimKey by 0003. Its own migration: on PostgreSQL an
# ALTER TABLE on domains_domain in the transaction that inserted rows referencing it fails
# ("pending trigger events").

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("domains", "0003_dkim_encrypt_existing_keys"),
    ]

    operations = [
        migrations.RemoveField(
            model_name="domain",
            name="dkim_private_key",
        ),
        migrations.RemoveField(
            model_name="domain",
            name="dkim_public_key",
        ),
        migrations.RemoveField(
            model_name="domain",
            name="dkim_selector",
        ),
    ]
