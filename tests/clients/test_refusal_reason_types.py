"""Both native clients list the service's refusal reasons (webhooks' `reason`, docs/webhooks.md), no more, no less."""

import re
import typing
from pathlib import Path

from mailservice_client import RefusalReason as PythonRefusalReason
from mailservice_client import WebhookFailureData

from messaging.models import RefusalReason

JS_TYPES = Path(__file__).resolve().parents[2] / "clients" / "js" / "src" / "index.d.ts"


def test_the_python_client_lists_every_reason():
    assert sorted(typing.get_args(PythonRefusalReason)) == sorted(RefusalReason.values)
    assert typing.get_type_hints(WebhookFailureData)["reason"] == PythonRefusalReason


def test_the_js_client_lists_every_reason():
    declared = re.search(r"export type RefusalReason =([^;]*);", JS_TYPES.read_text())
    assert declared is not None
    assert sorted(re.findall(r'"([a-z_]+)"', declared.group(1))) == sorted(RefusalReason.values)
    assert "reason?: RefusalReason;" in JS_TYPES.read_text()
