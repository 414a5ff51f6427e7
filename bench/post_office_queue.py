"""`python -m bench.post_office_queue < spec.json`: migrate post_office's database and queue the messages.

Run with DJANGO_SETTINGS_MODULE=bench.post_office_settings. The spec (JSON on stdin) gives the
count and the message (sender, recipients, subject, text, html); the queued emails are then sent
by post_office's own `send_queued_mail` command, which the dispatch scenario times.
"""

import json
import sys

import django


def main() -> None:
    spec = json.load(sys.stdin)
    django.setup()
    from django.core.management import call_command
    from post_office import mail

    call_command("migrate", verbosity=0)
    message = {
        "sender": spec["sender"],
        "recipients": spec["recipients"],
        "subject": spec["subject"],
        "message": spec["text"],
        "html_message": spec["html"],
    }
    for start in range(0, spec["count"], 1000):
        mail.send_many([message] * min(1000, spec["count"] - start))


if __name__ == "__main__":
    main()
