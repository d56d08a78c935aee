"""tests/lanes.py: the per-lane summary the suite prints after a run with integration tests."""

from __future__ import annotations

from tests.lanes import OFFLINE, Span, cpu_table, during, spans, summary, worker_cpu

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


def test_each_phase_is_charged_its_own_workers_cpu_even_when_modules_interleave() -> None:
    """gw2 runs offline tests, then an integration module, then offline tests again: each module gets
    the CPU-s its own phases took, from the worker's counts at each report."""
    phases = [
        ("gw2", "tests/test_plan.py::test_x", 0.0, 1.0, 5.0),  # the worker's start and collection: its first module's
        ("gw2", f"{A}::test_a", 1.0, 50.0, 45.0),
        ("gw2", "tests/test_plan.py::test_y", 50.0, 51.0, 46.5),
        ("gw0", f"{B}::test_c", 0.0, 30.0, 20.0),
        ("gw0", f"{B}::test_d", 30.0, 31.0, None),  # a report without the count (a run of another conftest) is skipped
        ("gw0", f"{B}::test_e", 31.0, 40.0, 26.0),
    ]
    assert worker_cpu(phases) == {("gw2", OFFLINE): 6.5, ("gw2", A): 40.0, ("gw0", B): 26.0}


def test_what_a_consumer_spent_is_taken_between_the_readings_around_the_span() -> None:
    readings = [(0.0, {"engine": 1.0, "machine": 10.0}), (10.0, {"engine": 4.0, "machine": 25.0}), (20.0, {"engine": 9.0})]
    assert during(readings, 5.0, 12.0) == {"engine": 8.0}  # from the reading at 0 to the one at 20; the machine is not in both
    assert during(readings, 10.0, 10.0) == {"engine": 0.0, "machine": 0.0}
    assert during(readings, -5.0, 99.0) == {"engine": 8.0}  # beyond the readings: the nearest ones
    assert during([], 0.0, 1.0) == {}


def test_the_cpu_table_charges_a_lane_its_own_engine_and_another_worker_both() -> None:
    phases = [
        ("gw0", f"{A}::test_a", 0.0, 10.0, 4.0),
        ("gw1", f"{B}::test_c", 0.0, 20.0, 7.0),
        ("gw2", f"{A}::test_z", 10.0, 20.0, 2.0),
        ("gw2", "tests/test_plan.py::test_x", 20.0, 21.0, 3.0),
    ]
    readings = [
        (0.0, {"engine": 0.0, "containers": 0.0, "engine 2": 0.0, "containers 2": 0.0, "machine": 0.0}),
        (10.0, {"engine": 5.0, "containers": 1.0, "engine 2": 2.0, "containers 2": 0.0, "machine": 20.0}),
        (21.0, {"engine": 6.0, "containers": 1.0, "engine 2": 9.0, "containers 2": 3.0, "machine": 40.0}),
    ]
    found = spans([(w, n, a, b) for w, n, a, b, _ in phases])
    rows = cpu_table(found, phases, readings)
    assert rows[1].split() == ["gw0", "test_slice.py", "10", "4", "5", "1"]
    assert rows[2].split() == ["gw1", "test_arm64.py", "20", "7", "9", "3"]
    assert rows[3].split() == ["gw2", "test_slice.py", "(both", "engines)", "10", "2", "8", "3"]  # 10-21: engines 1+7, containers 0+3
    assert rows[4].split() == ["gw2", "offline", "tests", "1", "1"]
    assert rows[-1] == (
        "the run: the machine 40 CPU-s: workers 14, containers 1, containers 2 3, engine 6, engine 2 9, "
        "the rest 7 (pytest's controller, the kernel's threads, other processes)"
    )
    assert cpu_table(spans([("gw0", "tests/test_plan.py::test_x", 0.0, 1.0)]), [], readings) == []
    unread = cpu_table(found, phases, [(0.0, {"machine": 0.0}), (21.0, {"machine": 40.0})])  # no engine could be read: blanks, not 0
    assert unread[1].split() == ["gw0", "test_slice.py", "10", "4"]
