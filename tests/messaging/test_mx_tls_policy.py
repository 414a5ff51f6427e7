"""Receiver-driven TLS of direct delivery: MTA-STS policies served over HTTPS on loopback by a test CA,
DANE TLSA records from the test DNS server (with the AD bit on chosen names), real SMTP receivers.
Each session's TLS-RPT outcome is captured where the delivery code reports it."""

import datetime
import hashlib
import http.server
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from dnslib import TLSA

from messaging.models import Status, TlsSessionCount
from messaging.outbound.direct import mta_sts, tls_policy
from messaging.outbound.direct.tls_policy import destination_tls_policy
from messaging.tls_reports.counts import tls_report
from tests.dns_server import Zone
from tests.harness import free_port, self_signed_certificate
from tests.messaging.test_mx_delivery import dispatched, mx, send

pytestmark = pytest.mark.django_db

POLICY_ADDRESSES = "127.0.0.{}"  # from .9 on, one policy server each (all on MAILSERVICE_MTA_STS_PORT)


@dataclass
class Authority:
    """A test CA: `issue` makes a server certificate chain (leaf, then this CA) for a name."""

    directory: Path
    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))

    def __post_init__(self) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA")])
        self.certificate = (
            self._builder(name, name, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = self.directory / "ca.pem"
        self.ca_file.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def _builder(self, subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        )

    def issue(self, host: str) -> tuple[ssl.SSLContext, x509.Certificate]:
        """A server context presenting a certificate for `host` and this CA; also the leaf itself."""
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            self._builder(
                x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]), self.certificate.subject, key.public_key()
            )
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        chain, key_file = self.directory / f"{host}.pem", self.directory / f"{host}.key"
        pem = serialization.Encoding.PEM
        chain.write_bytes(leaf.public_bytes(pem) + self.certificate.public_bytes(pem))
        key_file.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return _server_context(chain, key_file), leaf


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


@dataclass
class PolicyServer:
    """What the HTTPS policy server answers; tests change it while it runs."""

    body: bytes = b""
    content_type: str = "text/plain"
    status: int = 200
    location: str = ""
    trickle: float = 0.0  # seconds between bytes of the body
    requests: int = 0


@contextmanager
def policy_server(context: ssl.SSLContext, address: str, port: int) -> Iterator[PolicyServer]:
    served = PolicyServer()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server hook
            served.requests += 1
            self.send_response(served.status)
            self.send_header("Content-Type", served.content_type)
            if served.location:
                self.send_header("Location", served.location)
            self.send_header("Content-Length", str(len(served.body)))
            self.end_headers()
            try:
                if not served.trickle:
                    self.wfile.write(served.body)
                for byte in served.body if served.trickle else b"":
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(served.trickle)
            except OSError:
                pass  # the client gave up

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads, server.block_on_close = True, False  # a trickling handler must not hold the teardown
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def authority(tmp_path, settings) -> Authority:
    ca = Authority(tmp_path)
    settings.MAILSERVICE_TLS_CA_FILE = str(ca.ca_file)
    return ca


@pytest.fixture
def outcomes(monkeypatch) -> list[dict]:
    """The TLS-RPT outcomes delivery reports, in order."""
    seen: list[dict] = []
    monkeypatch.setattr(tls_policy, "record_tls_outcome", lambda **outcome: seen.append(outcome))
    return seen


@pytest.fixture
def sts(zone, authority, settings) -> Callable[..., PolicyServer]:
    """Publish an MTA-STS policy for a domain: `sts("secure.test", "enforce", ["mx.secure.test"])`."""
    settings.MAILSERVICE_MTA_STS_PORT = free_port()
    servers: list = []

    def publish(domain: str, mode: str, patterns: list[str], *, certificate_for: str = "") -> PolicyServer:
        zone.publish_txt(f"_mta-sts.{domain}", "v=STSv1; id=1")
        address = POLICY_ADDRESSES.format(9 + len(servers))
        zone.publish_address(f"mta-sts.{domain}", address)
        context, _ = authority.issue(certificate_for or f"mta-sts.{domain}")
        manager = policy_server(context, address, settings.MAILSERVICE_MTA_STS_PORT)
        served = manager.__enter__()
        servers.append(manager)
        lines = ["version: STSv1", f"mode: {mode}", *(f"mx: {p}" for p in patterns), "max_age: 86400"]
        served.body = "\r\n".join(lines).encode()
        return served

    yield publish
    for manager in servers:
        manager.__exit__(None, None, None)


def test_enforce_with_a_trusted_certificate_for_the_mx_name_delivers_over_tls(
    zone, receivers, authority, sts, outcomes
):
    mx(zone, "secure.test", (10, "mx.secure.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=authority.issue("mx.secure.test")[0])
    sts("secure.test", "enforce", ["mx.secure.test"])

    assert send("bob@secure.test").delivered

    assert [received.tls for received in receiver.received] == [True]
    assert [(o["policy_type"], o["mx_host"], o["result_type"]) for o in outcomes] == [("sts", "mx.secure.test", "")]
    assert "mode: enforce" in outcomes[0]["policy_strings"]
    assert destination_tls_policy(domain="secure.test") == "MTA-STS enforce"


@pytest.mark.parametrize(
    ("certificate", "result_type"),
    [
        ("self-signed", "certificate-not-trusted"),
        ("another name", "certificate-host-mismatch"),
        ("no STARTTLS", "starttls-not-supported"),
    ],
)
def test_enforce_with_a_bad_certificate_defers_and_never_sends_in_clear(
    zone, receivers, authority, sts, outcomes, tmp_path, certificate, result_type
):
    if certificate == "self-signed":
        context = _server_context(*self_signed_certificate(tmp_path / "self", host="mx.secure.test"))
    elif certificate == "another name":
        context = authority.issue("mx.elsewhere.test")[0]
    else:
        context = None
    mx(zone, "secure.test", (10, "mx.secure.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=context)
    sts("secure.test", "enforce", ["mx.secure.test"])

    message = dispatched("bob@secure.test")

    assert message.status == Status.ACCEPTED
    assert message.last_error.startswith("450 4.7.5 MTA-STS policy of secure.test (enforce): mx.secure.test")
    assert receiver.received == [] and receiver.connections == 1
    assert [o["result_type"] for o in outcomes] == [result_type]


def test_enforce_skips_an_unlisted_mx_and_defers_when_none_is_listed(zone, receivers, authority, sts, outcomes):
    mx(zone, "secure.test", (10, "mx.other.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=authority.issue("mx.other.test")[0])
    sts("secure.test", "enforce", ["*.secure.test"])

    result = send("bob@secure.test")

    assert result.final.code == 450
    assert result.final.text == (
        "4.7.5 MTA-STS policy of secure.test (enforce): mx.other.test is not listed in its mx patterns"
    )
    assert receiver.connections == 0
    assert [(o["mx_host"], o["result_type"]) for o in outcomes] == [("mx.other.test", "validation-failure")]


def test_testing_mode_delivers_as_usual_and_reports_the_failure(zone, receivers, authority, sts, outcomes, tmp_path):
    context = _server_context(*self_signed_certificate(tmp_path / "self", host="mx.trial.test"))
    mx(zone, "trial.test", (10, "mx.trial.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=context)
    sts("trial.test", "testing", ["mx.trial.test"])

    assert send("bob@trial.test").delivered

    assert [received.tls for received in receiver.received] == [True]  # opportunistic, as without a policy
    assert [(o["policy_type"], o["result_type"]) for o in outcomes] == [("sts", "certificate-not-trusted")]
    assert destination_tls_policy(domain="trial.test") == "MTA-STS testing"


def publish_sts_id(zone: Zone, domain: str, policy_id: str) -> None:
    zone.records[(f"_mta-sts.{domain}", "TXT")] = []
    zone.publish_txt(f"_mta-sts.{domain}", f"v=STSv1; id={policy_id}")


def test_a_policy_is_cached_until_the_txt_id_changes_and_a_failed_refresh_keeps_it(
    zone, receivers, authority, sts, outcomes, monkeypatch
):
    mx(zone, "secure.test", (10, "mx.secure.test", "127.0.0.2"))
    receivers("127.0.0.2", tls_context=authority.issue("mx.secure.test")[0])
    served = sts("secure.test", "enforce", ["mx.secure.test"])
    monkeypatch.setattr(mta_sts, "FETCH_INTERVAL_SECONDS", 0)  # Django's cache keeps nothing for 0 s

    assert send("bob@secure.test").delivered and send("bob@secure.test").delivered
    assert served.requests == 1

    publish_sts_id(zone, "secure.test", "2")
    served.body = served.body.replace(b"mx: mx.secure.test", b"mx: mx9.secure.test")
    result = send("bob@secure.test")
    assert served.requests == 2 and result.final.text.startswith("4.7.5")  # the new policy lists another host

    monkeypatch.setattr(mta_sts, "FETCH_INTERVAL_SECONDS", 300)
    publish_sts_id(zone, "secure.test", "3")
    served.status = 500
    for _ in range(2):
        result = send("bob@secure.test")
        assert result.final.text.startswith("4.7.5")  # the cached policy still holds
    assert served.requests == 3  # a failed fetch is not repeated within the interval


def test_an_id_that_changes_on_every_lookup_costs_one_fetch_per_interval(zone, receivers, authority, sts, outcomes):
    """Issue 40, item 7: each batch used to fetch anew (and wait out a failing fetch's deadline)."""
    mx(zone, "churn.test", (10, "mx.churn.test", "127.0.0.2"))
    receivers("127.0.0.2", tls_context=authority.issue("mx.churn.test")[0])
    served = sts("churn.test", "enforce", ["mx.churn.test"])

    for policy_id in ("1", "2", "3", "4"):
        publish_sts_id(zone, "churn.test", policy_id)
        assert send("bob@churn.test").delivered  # under the policy fetched first, still unexpired
    assert served.requests == 1
    assert {o["policy_type"] for o in outcomes} == {"sts"}


@pytest.mark.parametrize(
    ("behaviour", "result_type"),
    [
        (
            {"body": b"version: STSv1\r\nmode: enforce\r\nmx: mx.hostile.test\r\n" + b"x" * 70_000},
            "sts-policy-fetch-error",
        ),
        ({"trickle": 0.05}, "sts-policy-fetch-error"),
        ({"body": b"version: STSv2\r\nmode: enforce\r\nmax_age: 60\r\n"}, "sts-policy-invalid"),
        ({"body": b"version: STSv1\r\nmode: enforce\r\nmax_age: soon\r\nmx: mx.hostile.test"}, "sts-policy-invalid"),
        ({"status": 301, "location": "https://elsewhere.test/"}, "sts-policy-fetch-error"),
        ({"content_type": "text/html"}, "sts-policy-fetch-error"),
    ],
    ids=["huge", "slow", "bad version", "bad max_age", "redirect", "not text/plain"],
)
def test_a_hostile_policy_server_gives_a_bounded_outcome_and_no_policy(
    zone, receivers, sts, outcomes, settings, behaviour, result_type
):
    settings.MAILSERVICE_SMTP_TIMEOUT = 1.0  # the fetch's deadline
    mx(zone, "hostile.test", (10, "mx.hostile.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2")
    served = sts("hostile.test", "enforce", ["mx.nowhere.test"])
    for name, value in behaviour.items():
        setattr(served, name, value)

    started = time.monotonic()
    assert send("bob@hostile.test").delivered  # no policy could be had: delivered as without one

    assert time.monotonic() - started < 3
    assert len(receiver.received) == 1
    assert [(o["policy_type"], o["result_type"]) for o in outcomes] == [("sts", result_type)]
    assert destination_tls_policy(domain="hostile.test") == "none"


def test_a_policy_host_whose_certificate_is_for_another_name_gives_no_policy(zone, receivers, sts, outcomes):
    mx(zone, "spoofed.test", (10, "mx.spoofed.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2")
    served = sts("spoofed.test", "enforce", ["mx.nowhere.test"], certificate_for="mta-sts.elsewhere.test")

    assert send("bob@spoofed.test").delivered

    assert len(receiver.received) == 1 and served.requests == 0  # the handshake failed before any request
    assert [(o["policy_type"], o["result_type"]) for o in outcomes] == [("sts", "sts-webpki-invalid")]


def _publish_dane(zone: Zone, host: str, address: str, port: int, *records: tuple[int, int, int, bytes]) -> None:
    for record in records:
        zone.publish_tlsa(f"_{port}._tcp.{host}", *record)
    zone.authenticated |= {host, f"_{port}._tcp.{host}"}


def _spki_sha256(certificate: x509.Certificate) -> bytes:
    spki = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).digest()


@pytest.mark.parametrize("usage", ["DANE-EE 3 1 1", "DANE-TA 2 0 1"])
def test_a_matching_tlsa_record_delivers_even_against_an_mta_sts_policy(
    zone, receivers, authority, sts, outcomes, mx_port, usage
):
    context, leaf = authority.issue("mx.signed.test")
    mx(zone, "signed.test", (10, "mx.signed.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=context)
    if usage.startswith("DANE-EE"):
        record = (3, 1, 1, _spki_sha256(leaf))
    else:
        ca_der = authority.certificate.public_bytes(serialization.Encoding.DER)
        record = (2, 0, 1, hashlib.sha256(ca_der).digest())
    _publish_dane(zone, "mx.signed.test", "127.0.0.2", mx_port, record)
    sts("signed.test", "enforce", ["mx.unlisted.test"])  # DANE takes precedence

    assert send("bob@signed.test").delivered

    assert [received.tls for received in receiver.received] == [True]
    assert [(o["policy_type"], o["result_type"]) for o in outcomes] == [("tlsa", "")]
    assert destination_tls_policy(domain="signed.test") == "DANE"


@pytest.mark.parametrize(("ttl", "second_delivered"), [(300, True), (0, False)])
def test_dane_answers_are_kept_for_their_ttl_across_batches(zone, receivers, authority, mx_port, ttl, second_delivered):
    zone.ttl = ttl
    context, leaf = authority.issue("mx.signed.test")
    mx(zone, "signed.test", (10, "mx.signed.test", "127.0.0.2"))
    receivers("127.0.0.2", tls_context=context)
    _publish_dane(zone, "mx.signed.test", "127.0.0.2", mx_port, (3, 1, 1, _spki_sha256(leaf)))
    assert send("bob@signed.test").delivered

    zone.records[(f"_{mx_port}._tcp.mx.signed.test", "TLSA")] = [TLSA(3, 1, 1, b"\x00" * 32)]  # matches nothing

    assert send("carol@signed.test").delivered is second_delivered


@pytest.mark.parametrize(
    ("case", "result_type"),
    [
        ("no record matches", "tlsa-invalid"),
        ("the TA matches, the certificate names another host", "tlsa-invalid"),
        ("no STARTTLS", "starttls-not-supported"),
    ],
)
def test_a_tlsa_mismatch_or_no_starttls_defers_without_sending(
    zone, receivers, authority, outcomes, mx_port, case, result_type
):
    context = None if case == "no STARTTLS" else authority.issue("mx.other.test")[0]
    ca_digest = hashlib.sha256(authority.certificate.public_bytes(serialization.Encoding.DER)).digest()
    record = (2, 0, 1, ca_digest) if case.startswith("the TA") else (3, 1, 1, b"\x00" * 32)
    mx(zone, "signed.test", (10, "mx.signed.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=context)
    _publish_dane(zone, "mx.signed.test", "127.0.0.2", mx_port, record)

    result = send("bob@signed.test")

    assert result.final.code == 450 and result.final.text.startswith("4.7.5 DANE TLSA of signed.test's MX")
    assert receiver.received == []
    assert [(o["policy_type"], o["result_type"]) for o in outcomes] == [("tlsa", result_type)]


def test_tlsa_records_without_the_ad_bit_are_ignored(zone, receivers, authority, outcomes, mx_port):
    context, _ = authority.issue("mx.unsigned.test")
    mx(zone, "unsigned.test", (10, "mx.unsigned.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=context)
    _publish_dane(zone, "mx.unsigned.test", "127.0.0.2", mx_port, (3, 1, 1, b"\x00" * 32))
    zone.authenticated.clear()

    assert send("bob@unsigned.test").delivered

    assert [received.tls for received in receiver.received] == [True]
    assert [(o["policy_type"], o["result_type"]) for o in outcomes] == [("no-policy-found", "")]


def test_a_failing_tlsa_lookup_for_a_signed_host_defers(zone, receivers, outcomes, mx_port):
    mx(zone, "signed.test", (10, "mx.signed.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2")
    zone.authenticated.add("mx.signed.test")
    zone.failing.add(f"_{mx_port}._tcp.mx.signed.test")

    result = send("bob@signed.test")

    assert result.final.code == 450 and "4.7.5 DANE TLSA of signed.test's MX" in result.final.text
    assert receiver.connections == 0
    assert [o["result_type"] for o in outcomes] == ["dnssec-invalid"]


def test_a_session_opened_without_policy_is_not_reused_for_a_domain_that_enforces_one(
    zone, receivers, authority, sts, outcomes
):
    mx(zone, "plain.test", (10, "mx.secure.test", "127.0.0.2"))
    mx(zone, "secure.test", (10, "mx.secure.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=authority.issue("mx.secure.test")[0])
    sts("secure.test", "enforce", ["mx.secure.test"])

    result = send("a@plain.test", "b@secure.test", "c@plain.test")

    assert result.delivered and sorted(result.accepted) == ["a@plain.test", "b@secure.test", "c@plain.test"]
    assert receiver.connections == 2  # the verified session then carries plain.test's mail too
    assert [o["policy_type"] for o in outcomes] == ["no-policy-found", "sts"]


def test_sessions_are_counted_for_the_tls_reports(zone, receivers, authority, sts):
    mx(zone, "secure.test", (10, "mx.secure.test", "127.0.0.2"))
    mx(zone, "trial.test", (10, "mx.trial.test", "127.0.0.3"))
    receivers("127.0.0.2", tls_context=authority.issue("mx.secure.test")[0])
    receivers("127.0.0.3")
    sts("secure.test", "enforce", ["mx.secure.test"])
    sts("trial.test", "testing", ["mx.trial.test"])

    assert send("a@secure.test", "b@trial.test").delivered

    counted = TlsSessionCount.objects.values_list("policy_domain", "policy_type", "mx_host", "result_type", "sessions")
    assert sorted(counted) == [
        ("secure.test", "sts", "mx.secure.test", "", 1),
        ("trial.test", "sts", "mx.trial.test", "starttls-not-supported", 1),
    ]


def test_mail_over_a_kept_session_is_counted_in_its_domains_tls_report(zone, receivers, authority):
    """Issue 40, item 7: two domains hosted on one MX; the second's mail goes over the session the first's
    batch opened and left idle, and its report counts that session (it was never counted before)."""
    mx(zone, "first.test", (10, "mx.hosting.test", "127.0.0.2"))
    mx(zone, "second.test", (10, "mx.hosting.test", "127.0.0.2"))
    zone.publish_txt("_smtp._tls.second.test", "v=TLSRPTv1; rua=mailto:tlsrpt@second.test")
    receiver = receivers("127.0.0.2", tls_context=authority.issue("mx.hosting.test")[0])

    assert send("a@first.test").delivered
    assert send("b@second.test").delivered  # the next batch, over the session kept idle
    assert send("c@second.test").delivered  # and again: the session is counted once for second.test

    assert receiver.connections == 1
    report = tls_report(
        day=datetime.datetime.now(datetime.UTC).date(),
        policy_domain="second.test",
        organization="acme.test",
        contact="c@acme.test",
        report_id="r1",
    )
    [policy] = report["policies"]
    assert policy["policy"]["policy-type"] == "no-policy-found"
    assert policy["summary"] == {"total-successful-session-count": 1, "total-failure-session-count": 0}


def test_a_session_kept_open_from_before_a_domain_published_enforce_does_not_carry_its_mail(
    zone, receivers, authority, sts, outcomes
):
    # The MTA-STS TXT record published below is seen by the next batch: the name has a record (no
    # NXDOMAIN, which the routing cache keeps: the test DNS server gives it no SOA, so no TTL) that lives 0 s.
    zone.ttl = 0
    zone.publish_txt("_mta-sts.secure.test", "not a policy record")
    mx(zone, "secure.test", (10, "mx.secure.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=authority.issue("mx.secure.test")[0])
    assert dispatched("a@secure.test").status == Status.DELIVERED  # no policy: opportunistic, unverified TLS

    sts("secure.test", "enforce", ["mx.secure.test"])
    assert dispatched("b@secure.test").status == Status.DELIVERED
    assert dispatched("c@secure.test").status == Status.DELIVERED

    # The opportunistic session (kept idle) was passed over for a verified one, which the next batch reused.
    assert receiver.connections == 2 and [received.tls for received in receiver.received] == [True] * 3
    assert [(o["policy_type"], o["result_type"]) for o in outcomes] == [("no-policy-found", ""), ("sts", "")]
