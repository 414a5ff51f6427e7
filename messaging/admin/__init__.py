"""messaging's console pages, one module each; importing them registers them (Django's admin
autodiscovery imports this package): messages and suppressions (`messages.py`), the domain pages with
the mail's side of them (`domains.py`), direct delivery's source addresses (`sources.py`) and the
report mail received (`reports.py`)."""

from messaging.admin import domains, messages, reports, sources

__all__ = ["domains", "messages", "reports", "sources"]
