"""The reference project's WSGI application, for gunicorn's sync workers."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.reference.settings")
application = get_wsgi_application()
