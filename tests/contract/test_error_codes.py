"""The table of error codes in docs/api.md is the enum's API codes with their statuses, nothing more or less."""

import re
from pathlib import Path

from mailservice.errors import OPERATOR_ONLY, STATUS_OF_CODE, ErrorCode

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def documented_error_table() -> dict[str, int]:
    """`| status | codes |` rows after "Error codes": each backquoted code with its row's status."""
    text = API_DOC.read_text()
    table = text[text.index("Error codes, stable for clients") :].split("\n\n")[1]
    codes: dict[str, int] = {}
    for row in table.splitlines():
        match = re.match(r"\|\s*(\d{3})\s*\|(.*)\|\s*$", row)
        if match:
            for code in re.findall(r"`(\w+)`", match.group(2)):
                assert code not in codes, f"{code} is listed twice"
                codes[code] = int(match.group(1))
    return codes


def test_the_documented_table_lists_every_api_code_with_its_status():
    api_codes = {str(code): status for code, status in STATUS_OF_CODE.items() if code not in OPERATOR_ONLY}
    assert documented_error_table() == api_codes


def test_every_code_has_a_status():
    assert set(STATUS_OF_CODE) == set(ErrorCode)
