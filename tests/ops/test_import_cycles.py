"""No import cycle between modules of the server (tests/import_cycles.py, run by `make lint` too)."""

import pytest

from tests.import_cycles import cycles, import_graph


def test_no_two_server_modules_import_each_other_round_a_loop():
    assert cycles(import_graph()) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_the_check_names_every_loop_and_only_loops(graph, expected):
    assert cycles(graph) == expected
