"""The bicycle design study (`experiments/bicycle_design.py`, issue 42) on the published linear
model of Meijaard et al. 2007 (`bicycle.linear_model`; derivatives by Richardson differences):
the weave and capsize speeds by Newton, their implicit derivatives dv/dp = −(∂g/∂p)/(∂g/∂v)
against central differences of the roots, and the Levenberg-Marquardt search for a
self-stable window. NumPy only, ~2 s; the study runs the same code on the 3-D model."""

import pathlib
import sys

import numpy as np

from jaxmbs.models import bicycle

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "experiments"))
import bicycle_design as study  # noqa: E402

P0 = np.array([bicycle.DEFAULTS[k] for k in study.DESIGN])


def test_speeds_and_their_implicit_derivatives(record_property):
    """The benchmark's v_w, v_c (those of `test_bicycle.py`, by Brent's method on the published
    matrices) to 1e-9 m/s; their derivatives with respect to (c, λ, m_H) within 1e-6
    (relative) of central differences of the Newton roots (measured: 3.1e-9, 1.2e-9)."""
    v, jacobian = study.speeds(study.linear_eigen, P0, (4.3, 6.0))
    assert np.max(np.abs(v - [4.292382536341105, 6.024262015388242])) < 1e-9
    h = study.STEP * np.abs(P0)
    differences = study.central_differences(
        lambda p: study.speeds(study.linear_eigen, p, tuple(v))[0], P0, h
    )
    error = max(study.relative_error(a, b) for a, b in zip(jacobian, differences, strict=True))
    record_property("bicycle_design_speed_gradient_error", error)
    assert error < 1e-6


def test_search_reaches_a_window_and_stalls_out_of_reach():
    """(3, 3.5) m/s is reached (|r| < 1e-9; the scan of max Re s finds the same ends) inside
    the bounds; (3, 6.5) m/s is out of their reach: the search stalls with |r| > 1 m/s."""
    v0 = study.speeds(study.linear_eigen, P0, (4.3, 6.0))[0]
    p, reached = study.search(study.linear_eigen, P0, np.array([3.0, 3.5]), v0)
    assert reached
    assert np.all((study.BOUNDS[:, 0] <= p) & (p <= study.BOUNDS[:, 1]))
    ends = study.stable_range(study.linear_eigen, p, study.scan(study.linear_eigen, p))
    assert np.max(np.abs(np.array(ends) - [3.0, 3.5])) < 1e-8
    p, reached = study.search(study.linear_eigen, P0, np.array([3.0, 6.5]), v0)
    v = study.speeds(study.linear_eigen, p, tuple(v0))[0]
    assert not reached
    assert np.linalg.norm(v - [3.0, 6.5]) > 1.0
