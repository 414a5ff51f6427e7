import os

from django.core.wsgi import get_wsgi_application

from config.startup import WORKER_BOOT_ERROR, one_line_errors

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
with one_line_errors("web", status=WORKER_BOOT_ERROR):
    application = get_wsgi_application()
