import pytest

from tests.webhooks.receiver import Receiver, webhook_receiver


@pytest.fixture
def receiver() -> Receiver:
    with webhook_receiver() as found:
        yield found
