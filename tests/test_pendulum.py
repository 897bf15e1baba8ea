"""Pendulum periods against closed forms (Blajer et al. 1994, Fig. 1, eq 24).

The period is read off the solution without root finding: started at rest, the angular
velocity vanishes again after one period T, so one Newton step on ω(t) = 0 from the
predicted T̂ gives T = T̂ − ω(T̂)/ω̇(T̂), with ω̇ from the solution's own accelerations.
"""

import numpy as np
import pytest
from scipy.special import ellipk

import jaxmbs
from jaxmbs.models import pendulum


def measured_period(mech, amplitude, predicted):
    q0, qd0 = pendulum.initial_state(mech, amplitude)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, predicted), rtol=1e-12, atol=1e-12)
    q, qd, qdd = sol.q[-1], sol.qd[-1], sol.qdd[-1]
    if mech.n == 3:  # physical pendulum: γ is a coordinate
        omega, omega_dot = qd[2], qdd[2]
    else:  # particle: ω = (x ẏ − y ẋ)/ρ², ω̇ = (x ÿ − y ẍ)/ρ²
        rho2 = q @ q
        omega = (q[0] * qd[1] - q[1] * qd[0]) / rho2
        omega_dot = (q[0] * qdd[1] - q[1] * qdd[0]) / rho2
    return predicted - float(omega / omega_dot)


def exact_period(mech, amplitude):
    """T = 4 √(L/g) K(sin²(θ₀/2)), L = (mρ² + J)/(mρ) the equivalent length."""
    p = {k: float(v) for k, v in mech.params.items()}
    length = (p["m"] * p["rho"] ** 2 + p.get("J", 0.0)) / (p["m"] * p["rho"])
    return 4 * np.sqrt(length / p["g"]) * ellipk(np.sin(amplitude / 2) ** 2)


MECHANISMS = {
    "mathematical": lambda: pendulum.mathematical_pendulum(m=1.3, rho=0.8, g=9.81),
    "physical": lambda: pendulum.physical_pendulum(m=2.0, J=0.07, rho=0.35, g=9.81),
}


@pytest.mark.parametrize("kind", MECHANISMS)
def test_small_amplitude_period(kind):
    mech = MECHANISMS[kind]()
    formula = pendulum.period(mech)  # 2π√(l/g) and 2π√((mρ²+J)/(mgρ))
    # At 1e-3 rad the finite-amplitude correction (θ₀²/16 ≈ 6e-8) is below the tolerance.
    T = measured_period(mech, 1e-3, formula)
    assert abs(T - formula) / formula < 1e-6


@pytest.mark.parametrize("kind", MECHANISMS)
def test_large_amplitude_period(kind):
    mech = MECHANISMS[kind]()
    amplitude = np.deg2rad(120.0)
    exact = exact_period(mech, amplitude)
    assert exact > 1.3 * pendulum.period(mech)  # far from the small-amplitude value
    T = measured_period(mech, amplitude, exact)
    assert abs(T - exact) / exact < 1e-6
