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


def test_every_procfile_process_has_a_systemd_unit_running_the_same_program():
    for line in (ROOT / "Procfile").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, command = line.partition(":")
        unit = (DEPLOY / "systemd" / f"mailservice-{name}.service").read_text()
        program = next(word for word in command.split() if "=" not in word)  # past any VAR=value prefix
        exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        assert program in exec_start, (name, program, exec_start)
