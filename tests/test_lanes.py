"""tests/lanes.py: the per-lane summary the suite prints after a run with integration tests."""

from __future__ import annotations

from tests.lanes import OFFLINE, Span, spans, summary

A = "tests/integration/test_slice.py"
B = "tests/integration/test_arm64.py"


def test_phases_fold_into_one_span_per_worker_and_module() -> None:
    found = spans(
        [
            ("gw0", f"{A}::test_a", 100.0, 110.0),
            ("gw0", f"{A}::test_b[x]", 110.0, 160.5),
            ("gw1", "tests/test_plan.py::test_x", 101.0, 102.0),
            ("gw1", f"{B}::test_c", 102.0, 300.0),
            ("gw0", "tests/test_render.py::test_y", 161.0, 170.0),
            ("gw0", "tests/test_lock.py::test_z", 165.0, 175.0),
        ]
    )
    assert found == [
        Span("gw0", A, 100.0, 160.5),
        Span("gw0", OFFLINE, 161.0, 175.0),
        Span("gw1", OFFLINE, 101.0, 102.0),
        Span("gw1", B, 102.0, 300.0),
    ]
    assert summary(found) == [
        "gw0 (ends 75 s): test_slice.py 0-60, offline tests 61-75",
        "gw1 (ends 200 s): offline tests 1-2, test_arm64.py 2-200",
    ]


def test_a_run_without_integration_tests_prints_nothing() -> None:
    assert summary(spans([("gw0", "tests/test_plan.py::test_x", 1.0, 2.0)])) == []
    assert summary([]) == []
