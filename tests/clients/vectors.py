"""Reading the shared test vectors (clients/test-vectors.json); clients/js/test/vectors.test.mjs reads them too."""

import json
from typing import Any

from tests.harness import ROOT

VECTORS_FILE = ROOT / "clients" / "test-vectors.json"


def expand(value: Any) -> Any:
    """Expand the vector file's macros ($repeat, $concat, $list, $join, $flat); clients/js does the same."""
    if isinstance(value, list):
        return [expand(item) for item in value]
    if not isinstance(value, dict):
        return value
    if "$repeat" in value:
        return value["$repeat"] * value["times"]
    if "$concat" in value:
        return "".join(expand(part) for part in value["$concat"])
    if "$list" in value:
        return [expand(value["$list"]) for _ in range(value["times"])]
    if "$join" in value:
        return value["sep"].join(expand(value["$join"]))
    if "$flat" in value:
        return [item for part in value["$flat"] for item in expand(part)]
    return {key: expand(item) for key, item in value.items()}


def vector_cases(language: str) -> list[dict[str, Any]]:
    cases = json.loads(VECTORS_FILE.read_text())["cases"]
    return [case for case in cases if case["language"] in ("both", language)]


def case_id(case: dict[str, Any]) -> str:
    return f"{case['style']}-{case['language']}-{case['name']}"
