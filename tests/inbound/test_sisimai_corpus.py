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

from messaging.inbound.reports import Report, ReportedOutcome, classify
from messaging.rfc5322.parsing import addresses, parse_bytes, part_text, subparts

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "bounces" / "sisimai"
# Rows read differently, with the reason (CORRECTIONS.md beside the table).
CORRECTED_PERM = {"lhost-sendmail-56.eml": "permanent"}
CORRECTED_FAILED_COUNT = {"lhost-qmail-25.eml": 2}
FAILURES = {ReportedOutcome.BOUNCE, ReportedOutcome.SOFT_BOUNCE, ReportedOutcome.DELAY}
_ENCODED_WORD = re.compile(r"=\?utf-8\?b\?([^?]{0,400})\?=", re.IGNORECASE)
# Fields in which a report or the returned message names a recipient that failed (RFC 3464, Exim/Google).
_FAILED_FIELD = re.compile(
    r"^(?:final-recipient|original-recipient|x-failed-recipients)[ \t]*:([^\n]{0,500})", re.I | re.M
)
_LIST_HEADERS = ("List-Post", "List-Owner", "List-Help", "List-Id", "X-Mailing-List", "Mailing-List", "X-BeenThere")
_MAILTO = re.compile(r"[^\s<>:@,;\"]{1,64}@[A-Za-z0-9.\-]{1,253}")


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
        failed_count = CORRECTED_FAILED_COUNT.get(row["file_id"], int(count.group(1)) if count else 0)
        found.append(Case(row["file_id"], row["expected_kind"], perm, failed_count, raw, report))
    return found


def bounces() -> list[Case]:
    return [case for case in cases() if case.kind == "bounce"]


def detected(case: Case) -> bool:
    return case.report is not None and any(r.outcome in FAILURES for r in case.report.recipients)


def message_text(raw: bytes) -> str:
    """Everything the message says, raw and decoded: where a right address must occur."""
    message = parse_bytes(raw)
    decoded = " ".join(part_text(part) or "" for part in message.walk() if not part.is_multipart())
    text = raw.decode("utf-8", "replace") + " " + decoded
    # Decoded before lower-casing: base64 is case-sensitive.
    return _ENCODED_WORD.sub(lambda match: base64.b64decode(match.group(1)).decode("utf-8", "replace"), text).lower()


def right_addresses(case: Case) -> bool:
    found = {recipient.address for recipient in case.report.recipients}
    text, sender = message_text(case.raw), set(addresses(parse_bytes(case.raw), "From"))
    return len(found) == case.failed_count and all(a and a in text and a not in sender for a in found)


def innocent_addresses(raw: bytes) -> set[str]:
    """Addresses that did not fail: the report's own sender and recipient, the returned message's
    sender, and list addresses; a sender that also is a recipient a failure field or the returned
    message's To/Cc names (someone who mailed themselves) is not innocent, a list address always is."""
    message = parse_bytes(raw)
    returned = [
        subparts(part)[0]
        for part in message.walk()
        if part.get_content_type() in {"message/rfc822", "message/global"} and subparts(part)
    ]
    senders = set(addresses(message, "From", "To", "Reply-To", "Return-Path", "Sender"))
    recipients = {
        value.lower()
        for field in _FAILED_FIELD.findall(raw.decode("utf-8", "replace"))
        for value in _MAILTO.findall(field)
    }
    lists: set[str] = set()
    for original in returned:
        senders |= set(addresses(original, "From", "Reply-To", "Return-Path", "Sender"))
        recipients |= set(addresses(original, "To", "Cc"))
        lists |= {found.lower() for name in _LIST_HEADERS for found in _MAILTO.findall(str(original.get(name, "")))}
    return (senders - recipients) | lists


def names_a_wrong_address(case: Case) -> bool:
    """More recipients than the table says failed, one the message never names, or an innocent one."""
    found = {recipient.address for recipient in case.report.recipients}
    text = message_text(case.raw)
    return (
        len(found) > case.failed_count
        or any(a and a not in text for a in found)
        or bool(found & innocent_addresses(case.raw))
    )


def figures() -> dict[str, float]:
    detected_bounces = [case for case in bounces() if detected(case)]
    non_reports = [case for case in cases() if case.kind == "none"]
    return {
        "recall": len(detected_bounces) / len(bounces()),
        "wrong_address_rate": sum(map(names_a_wrong_address, detected_bounces)) / len(detected_bounces),
        "non_reports_as_hard_bounces": sum(
            any(r.outcome == ReportedOutcome.BOUNCE for r in case.report.recipients) for case in non_reports
        ),
    }


def test_the_corpus_is_there_with_its_license():
    assert "BSD 2-CLAUSE LICENSE" in (CORPUS / "LICENSE").read_text()
    assert len(cases()) >= 600


def test_nothing_crashes():
    assert [case.file for case in cases() if case.report is None] == []


def test_at_least_97_percent_of_bounces_are_detected():
    missed = [case.file for case in bounces() if not detected(case)]
    assert 1 - len(missed) / len(bounces()) >= 0.97, missed


def test_the_figures_are_within_the_issue_thresholds(record_property):
    """The three figures are printed in the terminal summary (tests/inbound/conftest.py)."""
    measured = figures()
    record_property("figure: recall", f"{measured['recall']:.2%}")
    record_property("figure: wrong-address rate", f"{measured['wrong_address_rate']:.2%}")
    record_property("figure: non-reports taken as hard bounces", measured["non_reports_as_hard_bounces"])
    assert measured["recall"] >= 0.97
    assert measured["wrong_address_rate"] <= 0.02
    assert measured["non_reports_as_hard_bounces"] == 0


def test_no_detected_bounce_names_the_sender_or_a_list_address():
    named = [
        case.file
        for case in bounces()
        if detected(case) and {r.address for r in case.report.recipients} & innocent_addresses(case.raw)
    ]
    assert named == []


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
