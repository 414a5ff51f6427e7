from typing import Any

from mailservice.commands import ServiceCommand
from messaging.outbound.dispatch import dispatch_sweep
from messaging.outbound.tasks import dispatch_task


class Command(ServiceCommand):
    help = (
        "One pass of the dispatch sweeper: queue dispatch for accepted messages that are due "
        "(a retry whose time has come, or a send whose task was lost). Without a broker they are sent in-process."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        due = dispatch_sweep(enqueue=lambda: dispatch_task.apply_async(retry=False))
        self.stdout.write(f"{due} message(s) due for dispatch")
