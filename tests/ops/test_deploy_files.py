"""The shipped Grafana dashboard and Prometheus alerts only use metrics the service exports."""

import json
import re

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import ROOT

DEPLOY = ROOT / "deploy"
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def _exported(settings) -> set[str]:
    settings.MAILSERVICE_METRICS_TOKEN = "t"
    text = Client().get("/metrics", headers={"Authorization": "Bearer t"}).content.decode()
    return {family.name for family in text_string_to_metric_families(text)}


def _referenced(text: str) -> set[str]:
    names = set(re.findall(r"\bmailservice_[a-z_]+", text))
    return {next((name.removesuffix(s) for s in SUFFIXES if name.endswith(s)), name) for name in names}


def _expressions() -> dict[str, str]:
    rules = yaml.safe_load((DEPLOY / "prometheus-alerts.yml").read_text())
    alerts = {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    panels = {f"panel {panel['title']}": target["expr"] for panel in dashboard["panels"] for target in panel["targets"]}
    return alerts | panels


@pytest.mark.django_db
def test_every_metric_the_alerts_and_the_dashboard_use_is_exported(settings):
    exported = _exported(settings)
    expressions = _expressions()

    missing = {where: sorted(_referenced(expr) - exported) for where, expr in expressions.items()}
    assert not {where: names for where, names in missing.items() if names}
    assert all(_referenced(expr) or "up{" in expr for expr in expressions.values())


def test_the_alerts_cover_the_queue_the_relay_and_the_pause_thresholds():
    alerts = set(_expressions())
    assert {
        "MailserviceQueueStuck",
        "MailserviceRelayFailing",
        "MailserviceBounceRateNearPause",
        "MailserviceComplaintRateNearPause",
    } <= alerts


def _procfile() -> dict[str, list[str]]:
    """Each process's words, past any VAR=value prefix."""
    processes = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, command = line.partition(":")
            words = command.split()
            processes[name] = words[next(i for i, word in enumerate(words) if "=" not in word) :]
    return processes


def _exec_start(name: str) -> list[str]:
    unit = (DEPLOY / "systemd" / f"mailservice-{name}.service").read_text()
    return next(line for line in unit.splitlines() if line.startswith("ExecStart=")).removeprefix("ExecStart=").split()


@pytest.mark.parametrize("name", sorted(_procfile()))
def test_every_procfile_process_has_a_systemd_unit_running_the_same_command(name):
    """The same program on the same module (the ASGI server, not the sync WSGI one), with every option the
    Procfile gives (values may differ: ports, worker counts)."""
    procfile, unit = _procfile()[name], _exec_start(name)
    assert unit[0].rsplit("/", 1)[-1] == procfile[0] and unit[1:3] == procfile[1:3], (procfile, unit)
    options = {word.partition("=")[0] for word in procfile if word.startswith("-")}
    assert options <= {word.partition("=")[0] for word in unit if word.startswith("-")}, (procfile, unit)


@pytest.mark.parametrize("name", ["inbound", "submission"])
def test_the_smtp_units_listen_on_every_address(name):
    unit = _exec_start(name)
    assert unit[unit.index("--host") + 1] == "0.0.0.0"  # noqa: S104 - what the units must say


def test_the_install_step_enables_every_unit():
    units = {path.stem for path in (DEPLOY / "systemd").glob("*.service")}
    install = next(
        line for line in (DEPLOY / "systemd" / "mailservice-web.service").read_text().splitlines() if "enable" in line
    )
    assert units == set(re.findall(r"mailservice-[a-z]+", install.partition("enable --now")[2]))
