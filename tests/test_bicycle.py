"""The Whipple benchmark bicycle (`jaxmbs.models.bicycle`) against the published linear model of
Meijaard, Papadopoulos, Ruina and Schwab (Proc. R. Soc. A 463, 2007; MPRS): their eq 5.3,
M q̈ + v C₁ q̇ + (g K₀ + v² K₂) q = 0 in q = (lean, steer), with the matrices they publish for
the benchmark parameters (Table 1) to 14 digits (their §6 / Appendix A, the numbers below).

References, independent of the 3-D model:

- `PUBLISHED`: MPRS's M, C₁, K₀, K₂; `bicycle.linear_model()` recomputes them from the
  parameters by the formulas of their Appendix A (a check of the numbers as typed here);
- the lean/steer eigenvalues: those of [[0, I], [−M⁻¹(g K₀ + v² K₂), −v M⁻¹C₁]];
- the weave speed (the oscillating pair's real part crosses zero, ≈ 4.292 m/s) and the
  capsize speed (the small real eigenvalue crosses zero, ≈ 6.024 m/s), by Brent's method on
  the published model.

The 3-D model — four spatial bodies, revolutes, `RollingDisc` wheels, mapped to nine
coordinates — is linearised by `jaxmbs.linearize` about upright straight running (a steady
motion; x, y, yaw and the wheel angles cyclic), compiled once (v traced).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

import jaxmbs
from jaxmbs.models import bicycle

G = 9.81
PUBLISHED = {
    "M": np.array([[80.81722, 2.31941332208709], [2.31941332208709, 0.29784188199686]]),
    "C1": np.array([[0.0, 33.86641391492494], [-0.85035641456978, 1.68540397397560]]),
    "K0": np.array([[-80.95, -2.59951685249872], [-2.59951685249872, -0.80329488458618]]),
    "K2": np.array([[0.0, 76.59734589573222], [0.0, 2.65431523794604]]),
}
SPEEDS = np.round(np.arange(0.0, 10.0 + 1e-9, 0.1), 10)


def published_eigenvalues(v: float) -> np.ndarray:
    M, C1, K0, K2 = (PUBLISHED[k] for k in ("M", "C1", "K0", "K2"))
    inverse = np.linalg.inv(M)
    A = np.block(
        [[np.zeros((2, 2)), np.eye(2)], [-inverse @ (G * K0 + v**2 * K2), -v * inverse @ C1]]
    )
    return np.linalg.eigvals(A)


def distance(a, b) -> float:
    """max |aᵢ − b_π(i)| over the best matching π of the four eigenvalues."""
    a, b = np.asarray(a), np.asarray(b)
    return min(float(np.max(np.abs(a - b[list(p)]))) for p in itertools.permutations(range(4)))


def weave_real_part(eigenvalues) -> float:
    s = np.asarray(eigenvalues)
    return float(np.max(s[np.abs(s.imag) > 1e-6].real))


def capsize_eigenvalue(eigenvalues) -> float:
    """The real eigenvalue nearest zero (the caster mode's is near −15)."""
    s = np.asarray(eigenvalues)
    real = s[np.abs(s.imag) <= 1e-6].real
    return float(real[np.argmin(np.abs(real))])


@pytest.fixture(scope="module")
def eigenvalues():
    """v ↦ the 3-D model's lean/steer eigenvalues, one compiled program."""
    mechanism = bicycle.bicycle()
    program = jax.jit(lambda v: bicycle.lean_steer_eigenvalues(mechanism, v))
    return lambda v: np.asarray(program(jnp.asarray(float(v))))


def test_linear_model_formulas_reproduce_the_published_matrices(record_property):
    """Appendix A's formulas at Table 1's parameters give the published 14-digit matrices."""
    ours = bicycle.linear_model()
    error = max(float(np.max(np.abs(ours[k] - PUBLISHED[k]))) for k in PUBLISHED)
    record_property("bicycle_appendix_a_error", error)
    assert error < 1e-11


def test_the_map_satisfies_the_revolutes():
    """At a generic θ, the four bodies' revolute rows vanish (the map builds them in)."""
    four = bicycle.four_bodies()
    theta = jnp.array([0.3, -0.2, 0.31, 0.4, 0.1, 0.05, 0.3, 1.0, -2.0])
    q = bicycle.absolute_coordinates(theta, four.params)
    phi = np.asarray(jaxmbs.position_residual(four, q, 0.0, four.params))
    groups = dict(four.constraint_groups)
    rows = [r for g in ("normalization", "rear_hub", "steer_axis", "front_hub") for r in groups[g]]
    assert float(np.max(np.abs(phi[rows]))) < 1e-14


def test_eigenvalues_against_the_published_model_on_a_speed_grid(eigenvalues, record_property):
    """v = 0, 0.1, …, 10 m/s: the four eigenvalues within 1e-8 of the published model's."""
    errors = [distance(eigenvalues(v), published_eigenvalues(v)) for v in SPEEDS]
    worst = float(np.max(errors))
    record_property("bicycle_eigenvalue_error", worst)
    record_property("bicycle_eigenvalue_error_speed", float(SPEEDS[int(np.argmax(errors))]))
    assert worst < 1e-8


def test_weave_and_capsize_speeds(eigenvalues, record_property):
    """The self-stable range's ends by Brent's method on the 3-D model, against the same roots
    of the published model (1e-6 m/s) and MPRS's rounded 4.292 and 6.024 m/s."""
    tol = dict(xtol=1e-12, rtol=1e-14)
    weave = brentq(lambda v: weave_real_part(eigenvalues(v)), 4.0, 4.6, **tol)
    capsize = brentq(lambda v: capsize_eigenvalue(eigenvalues(v)), 5.6, 6.4, **tol)
    weave_ref = brentq(lambda v: weave_real_part(published_eigenvalues(v)), 4.0, 4.6, **tol)
    capsize_ref = brentq(lambda v: capsize_eigenvalue(published_eigenvalues(v)), 5.6, 6.4, **tol)
    record_property("bicycle_weave_speed", weave)
    record_property("bicycle_capsize_speed", capsize)
    record_property("bicycle_weave_error", abs(weave - weave_ref))
    record_property("bicycle_capsize_error", abs(capsize - capsize_ref))
    assert abs(weave - weave_ref) < 1e-6
    assert abs(capsize - capsize_ref) < 1e-6
    assert abs(weave - 4.292) < 5e-4
    assert abs(capsize - 6.024) < 5e-4


def test_bad_parameters_are_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown parameters \['trail'\]"):
        bicycle.bicycle(trail=0.1)
    with pytest.raises(ValueError, match=r"must be positive: \['rR'\]"):
        bicycle.bicycle(rR=-0.3)
    with pytest.raises(ValueError, match=r"not finite: \['mB'\]"):
        bicycle.linear_model(mB=float("nan"))
