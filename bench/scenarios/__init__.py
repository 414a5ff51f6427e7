"""The scenario registry: each module exposes SCENARIO (delivery_control two), listed here in run order."""

from bench.scenario import Scenario
from bench.scenarios import (
    accept,
    app_view,
    batch,
    delivery_control,
    dispatch,
    embedded,
    inbound,
    isolation,
    listing,
    memory,
    pooled,
    purge,
    sizing,
    submission,
    webhooks,
)

SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in [
        accept.SCENARIO,
        dispatch.SCENARIO,
        listing.SCENARIO,
        inbound.SCENARIO,
        embedded.SCENARIO,
        submission.SCENARIO,
        purge.SCENARIO,
        delivery_control.FAIRNESS,
        delivery_control.RELAY,
        isolation.SCENARIO,
        webhooks.SCENARIO,
        memory.SCENARIO,
        batch.SCENARIO,
        pooled.SCENARIO,
        sizing.SCENARIO,
        app_view.SCENARIO,
    ]
}
