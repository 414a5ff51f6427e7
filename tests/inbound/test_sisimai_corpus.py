"""The sisimai corpus (tests/fixtures/bounces/sisimai, BSD-2-Clause) through `classify`, with the issue's thresholds.

A regression set, not the goal: the rules in messaging.inbound.reports come from the formats
(RFC 3464/3463/6533/5965 and vendors' documents). The measured figures are in docs/inbound.md.
"""

import base64
import csv
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from messaging.inbound.parsing import addresses, parse_bytes, part_text
from messaging.inbound.reports import Report, ReportedOutcome, classify

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "bounces" / "sisimai"
# Rows read differently, with the reason (CORRECTIONS.md beside the table).
CORRECTED_PERM = {"lhost-sendmail-56.eml": "permanent"}
FAILURES = {ReportedOutcome.BOUNCE, ReportedOutcome.SOFT_BOUNCE, ReportedOutcome.DELAY}
_ENCODED_WORD = re.compile(r"=\?utf-8\?b\?([^?]{0,400})\?=", re.IGNORECASE)


@dataclass(frozen=True)
class Case:
    file: str
    kind: str
    perm: str
    failed_count: int
    raw: bytes
    report: Report | None  # None: classify raised


@cache
def cases() -> list[Case]:
    with (CORPUS / "expectations.csv").open() as table:
        rows = [row for row in csv.DictReader(table) if row["expected_kind"]]
    found = []
    for row in rows:
        raw = (CORPUS / row["file_id"]).read_bytes()
        try:
            report = classify(raw)
        except Exception:  # noqa: BLE001 - counted as a crash below
            report = None
        count = re.search(r"(\d+) failed recipient", row["note"])
        perm = CORRECTED_PERM.get(row["file_id"], row["expected_perm"])
        found.append(Case(row["file_id"], row["expected_kind"], perm, int(count.group(1)) if count else 0, raw, report))
    return found


def bounces() -> list[Case]:
    return [case for case in cases() if case.kind == "bounce"]


def detected(case: Case) -> bool:
    return case.report is not None and any(r.outcome in FAILURES for r in case.report.recipients)


def message_text(raw: bytes) -> str:
    """Everything the message says, raw and decoded: where a right address must occur."""
    message = parse_bytes(raw)
    decoded = " ".join(part_text(part) or "" for part in message.walk() if not part.is_multipart())
    text = (raw.decode("utf-8", "replace") + " " + decoded).lower()
    return _ENCODED_WORD.sub(lambda match: base64.b64decode(match.group(1)).decode("utf-8", "replace"), text)


def right_addresses(case: Case) -> bool:
    found = {recipient.address for recipient in case.report.recipients}
    text, sender = message_text(case.raw), set(addresses(parse_bytes(case.raw), "From"))
    return len(found) == case.failed_count and all(a and a in text and a not in sender for a in found)


def test_the_corpus_is_there_with_its_license():
    assert "BSD 2-CLAUSE LICENSE" in (CORPUS / "LICENSE").read_text()
    assert len(cases()) >= 600


def test_nothing_crashes():
    assert [case.file for case in cases() if case.report is None] == []


def test_at_least_97_percent_of_bounces_are_detected():
    missed = [case.file for case in bounces() if not detected(case)]
    assert 1 - len(missed) / len(bounces()) >= 0.97, missed


def test_the_right_address_for_at_least_97_percent_of_detected_bounces():
    found = [case for case in bounces() if detected(case)]
    wrong = [case.file for case in found if not right_addresses(case)]
    assert 1 - len(wrong) / len(found) >= 0.97, wrong


def test_no_non_report_is_taken_as_a_bounce():
    taken = [
        case.file
        for case in cases()
        if case.kind == "none"
        and any(r.outcome in {ReportedOutcome.BOUNCE, ReportedOutcome.SOFT_BOUNCE} for r in case.report.recipients)
    ]
    assert taken == []


def test_no_temporary_only_failure_is_taken_as_a_hard_bounce():
    hard = [
        case.file
        for case in bounces()
        if case.perm == "temporary" and any(r.outcome == ReportedOutcome.BOUNCE for r in case.report.recipients)
    ]
    assert hard == []


def test_complaints_are_recognised():
    complaints = [case for case in cases() if case.kind == "complaint"]
    assert [case.file for case in complaints if case.report.kind != "complaint"] == []
