"""Shared tolerances and helpers for the tests."""

import numpy as np

#: Agreement between formulations at one state (q̈, λ).
FORMULATION_RTOL = 1e-10


def assert_close(actual, expected, rtol, atol=0.0, what=""):
    actual, expected = np.asarray(actual), np.asarray(expected)
    err = np.max(np.abs(actual - expected) - rtol * np.abs(expected), initial=0.0)
    assert err <= atol, f"{what}: max deviation beyond tolerance {err:.3e}\n{actual}\n{expected}"


def relative_error(actual, expected) -> float:
    actual, expected = np.asarray(actual), np.asarray(expected)
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
