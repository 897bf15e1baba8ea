"""Shared tolerances and helpers for the tests."""

import gc

import numpy as np

#: Agreement between formulations at one state (q̈, λ).
FORMULATION_RTOL = 1e-10


def collect_less() -> None:
    """The cyclic collector of a test process, called once its imports are done.

    Tracing allocates millions of short-lived Python objects, and CPython's cyclic
    collector, run every 700 net allocations, scans them again and again: 20 % of the CPU
    time of tracing and lowering a four-bar gradient (3.8 → 3.0 s) and of the McPherson
    strut's solve (1.7 → 1.4 s); the documentation's pages 120 → 102 s. The objects alive
    after the imports are frozen out of the scans, and the collector runs every 100 000
    allocations (cycles are still collected). The library leaves the interpreter's collector
    alone; this is the test processes' choice (pytest's, tests/conftest.py, and the
    subprocesses some tests start)."""
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)


def assert_close(actual, expected, rtol, atol=0.0, what=""):
    actual, expected = np.asarray(actual), np.asarray(expected)
    err = np.max(np.abs(actual - expected) - rtol * np.abs(expected), initial=0.0)
    assert err <= atol, f"{what}: max deviation beyond tolerance {err:.3e}\n{actual}\n{expected}"


def relative_error(actual, expected) -> float:
    actual, expected = np.asarray(actual), np.asarray(expected)
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


def assert_same_solve(y, steps, y_ref, steps_ref, atol, integration_atol, what=""):
    """Two solves of one problem whose arithmetic differs only by round-off (summation order,
    batched or unbatched kernels) take the same steps and agree to `atol` — unless an
    accept/reject decision of the step-size controller falls within round-off of its
    threshold. Then they differ by a step or two and agree to the integration accuracy
    `integration_atol` only (measured on the four-bar at rtol = atol = 1e-8 over 1 s: one to
    three steps more or fewer move q by up to 1.2e-8)."""
    steps, steps_ref = int(steps), int(steps_ref)
    deviation = float(np.max(np.abs(np.asarray(y) - np.asarray(y_ref))))
    if steps == steps_ref:
        assert deviation <= atol, f"{what}: {deviation:.3e} > {atol:.1e} in the same steps"
    else:
        assert abs(steps - steps_ref) <= 3, f"{what}: {steps} steps against {steps_ref}"
        assert deviation <= integration_atol, f"{what}: {deviation:.3e} > {integration_atol:.1e}"
