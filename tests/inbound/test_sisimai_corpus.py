"""The sisimai corpus (tests/fixtures/bounces/sisimai, BSD-2-Clause) through `classify`, with the issue's thresholds.

A regression set, not the goal: the rules in messaging.inbound.reports come from the formats
(RFC 3464/3463/6533/5965 and vendors' documents). The measured figures are in docs/inbound.md.
"""

import csv
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from messaging.inbound.reports import Report, ReportedOutcome, classify
from messaging.inbound.services import report_verdict
from messaging.rfc5322.parsing import addresses, parse_bytes
from tests.inbound.corpus import innocent_addresses, message_text

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "bounces" / "sisimai"
# Rows read differently, with the reason (CORRECTIONS.md beside the table).
CORRECTED_PERM = {"lhost-sendmail-56.eml": "permanent"}
CORRECTED_FAILED_COUNT = {"lhost-qmail-25.eml": 2}
FAILURES = {ReportedOutcome.BOUNCE, ReportedOutcome.SOFT_BOUNCE, ReportedOutcome.DELAY}


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


def right_addresses(case: Case) -> bool:
    found = {recipient.address for recipient in case.report.recipients}
    text, sender = message_text(case.raw), set(addresses(parse_bytes(case.raw), "From"))
    return len(found) == case.failed_count and all(a and a in text and a not in sender for a in found)


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


# --- reasons ------------------------------------------------------------------------------------------

# Sisimai's reasons (lib/Sisimai/Reason/*.pm, its documentation of each) mapped onto ours: the reasons of
# ours each of its labels may be. Written from sisimai's definitions before the figures were read.
# `onhold` and `undefined` (sisimai could not decide) are not scored.
SISIMAI_REASONS: dict[str, set[str]] = {
    "userunknown": {"user_unknown"},
    "hasmoved": {"user_unknown"},
    "suspend": {"mailbox_disabled"},
    "hostunknown": {"domain_not_found"},
    "notaccept": {"domain_not_found"},  # null MX, or a host that accepts no mail at all
    "mailboxfull": {"mailbox_full"},
    "systemfull": {"mailbox_full", "other"},
    "expired": {"expired"},
    "networkerror": {"host_unreachable", "domain_not_found"},
    "blocked": {"blocked"},  # the client's IP address or host name
    "badreputation": {"blocked"},
    "rejected": {"blocked", "policy", "authentication"},  # the envelope sender's address or domain
    "authfailure": {"authentication"},
    "requireptr": {"authentication"},
    "spamdetected": {"spam_detected"},
    "virusdetected": {"content_rejected"},
    "contenterror": {"content_rejected"},
    "mesgtoobig": {"content_rejected"},
    "exceedlimit": {"content_rejected"},
    "policyviolation": {"policy", "content_rejected"},
    "securityerror": {"policy", "authentication"},
    "notcompliantrfc": {"policy", "content_rejected"},
    "norelaying": {"policy"},
    "failedstarttls": {"policy"},
    "filtered": {"user_unknown", "policy", "blocked", "spam_detected", "content_rejected"},  # a recipient's filter
    "toomanyconn": {"rate_limited"},
    "speeding": {"rate_limited"},
    "systemerror": {"other", "host_unreachable"},
    "mailererror": {"other"},
    "syntaxerror": {"other", "policy"},
}
# Sisimai's labels for a block of the sender: never a reason to suppress the recipient.
SENDER_BLOCKS = {"blocked", "badreputation", "rejected", "authfailure", "requireptr", "spamdetected", "policyviolation"}


@dataclass(frozen=True)
class Scored:
    file: str
    sisimai: str
    ours: str
    suppresses: bool


@cache
def scored_recipients() -> list[Scored]:
    """Each failed recipient of a detected bounce with sisimai's label: by address when the table lists one
    per reason, else the case's one label when all its recipients share it."""
    with (CORPUS / "expectations.csv").open() as table:
        rows = {row["file_id"]: row for row in csv.DictReader(table)}
    found = []
    for case in bounces():
        if not detected(case):
            continue
        row = rows[case.file]
        labels, named = row["expected_reasons"].split(";"), row["expected_addresses"].split()
        by_address = dict(zip(named, labels, strict=True)) if len(named) == len(labels) else {}
        for recipient in case.report.recipients:
            if recipient.outcome not in FAILURES:
                continue
            label = by_address.get(recipient.address) or (labels[0] if len(set(labels)) == 1 else "")
            if label in SISIMAI_REASONS:
                verdict = report_verdict(recipient)
                found.append(Scored(case.file, label, verdict.reason, verdict.suppresses))
    return found


# Issue 42's goals are 90 % agreement and no sender block suppressing; measured 2026-12-05: 68.45 % and 5.
# These floors keep what is reached from slipping; the goals are not met (docs/inbound.md says so).
AGREEMENT_FLOOR = 0.68
SENDER_BLOCKS_SUPPRESSING_CEILING = 5


def test_reasons_agree_with_sisimais_labels(record_property):
    scored = scored_recipients()
    disagree = [(s.file, s.sisimai, s.ours) for s in scored if s.ours not in SISIMAI_REASONS[s.sisimai]]
    agreement = 1 - len(disagree) / len(scored)
    record_property("figure: reason agreement with sisimai", f"{agreement:.2%} of {len(scored)} recipients")
    assert len(scored) >= 500
    assert agreement >= AGREEMENT_FLOOR, disagree


def test_blocks_of_the_sender_taken_as_suppressing(record_property):
    taken = [(s.file, s.sisimai, s.ours) for s in scored_recipients() if s.sisimai in SENDER_BLOCKS and s.suppresses]
    record_property("figure: sender blocks taken as suppressing", len(taken))
    assert len(taken) <= SENDER_BLOCKS_SUPPRESSING_CEILING, taken
