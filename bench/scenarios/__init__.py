"""The scenario registry: a scenario is one module exposing SCENARIO, listed here in run order."""

from bench.scenario import Scenario
from bench.scenarios import accept, dispatch, embedded, inbound, listing, purge, submission

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
    ]
}
