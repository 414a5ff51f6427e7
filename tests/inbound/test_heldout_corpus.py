"""A held-out corpus (tests/fixtures/bounces/heldout-php-bounce-handler, BSD-3-Clause): real bounces and
feedback reports the rules were not written from (its README says how it was labelled, by file name
alone). Its figures are printed in the terminal summary (tests/inbound/conftest.py): recall, the share of
detected bounces that name a wrong address, and non-reports taken as bounces.

Issue 42's goals: recall >= 97 %, wrong addresses <= 2 %, no non-report taken as a bounce. Measured when the
set was added (2026-12-05, before any rule was changed for it, and none has been since): recall 95.45 %
(63 of 66), 0 wrong addresses, 0 non-reports taken as bounces, 9 of 10 complaints recognised. The recall
goal is not met; the floors below keep the rest from slipping."""

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from messaging.inbound.reports import Report, ReportedOutcome, classify
from messaging.inbound.services import report_verdict
from tests.inbound.corpus import innocent_addresses, message_text

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "bounces" / "heldout-php-bounce-handler"
FAILURES = {ReportedOutcome.BOUNCE, ReportedOutcome.SOFT_BOUNCE, ReportedOutcome.DELAY}
RECALL_FLOOR = 0.95
COMPLAINTS_FLOOR = 9


@dataclass(frozen=True)
class Case:
    file: str
    kind: str
    raw: bytes
    report: Report


@cache
def cases() -> list[Case]:
    with (CORPUS / "expectations.csv").open() as table:
        rows = [row for row in csv.DictReader(table) if row["expected_kind"]]
    return [
        Case(row["file"], row["expected_kind"], raw, classify(raw))
        for row in rows
        for raw in [(CORPUS / row["file"]).read_bytes()]
    ]


def failed(case: Case) -> list:
    return [recipient for recipient in case.report.recipients if recipient.outcome in FAILURES]


def names_a_wrong_address(case: Case) -> bool:
    """An address the message never names, or one that did not fail (its sender, a list)."""
    found = {recipient.address for recipient in failed(case)}
    return any(a and a not in message_text(case.raw) for a in found) or bool(found & innocent_addresses(case.raw))


def test_the_corpus_is_there_with_its_license():
    assert "Redistribution and use in source and binary forms" in (CORPUS / "LICENSE").read_text()
    assert len([case for case in cases() if case.kind == "bounce"]) >= 60


def test_the_figures_meet_the_goals(record_property):
    bounces = [case for case in cases() if case.kind == "bounce"]
    detected = [case for case in bounces if failed(case)]
    others = [case for case in cases() if case.kind != "bounce"]
    recall = len(detected) / len(bounces)
    wrong = sum(map(names_a_wrong_address, detected)) / len(detected)
    taken = [case.file for case in others if failed(case)]
    suppressing = [case.file for case in others if any(report_verdict(r).suppresses for r in failed(case))]
    record_property("figure: recall", f"{recall:.2%} ({len(detected)} of {len(bounces)})")
    record_property("figure: wrong-address rate", f"{wrong:.2%}")
    record_property("figure: non-reports taken as bounces", len(taken))
    record_property("figure: non-reports taken as suppressing bounces", len(suppressing))
    missed = [case.file for case in bounces if not failed(case)]
    assert recall >= RECALL_FLOOR, missed
    assert wrong <= 0.02, [case.file for case in detected if names_a_wrong_address(case)]
    assert taken == [] and suppressing == []


def test_complaints_are_complaints(record_property):
    complaints = [case for case in cases() if case.kind == "complaint"]
    recognised = [case for case in complaints if case.report.kind == "complaint"]
    record_property("figure: complaints recognised", f"{len(recognised)} of {len(complaints)}")
    assert len(recognised) >= COMPLAINTS_FLOOR
