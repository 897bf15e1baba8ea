"""`linearize` composed with `equilibrium` under `jax.grad`: the torsion pendulum's natural
frequency as a function of its spring stiffness k, through the equilibrium's implicit
derivative and the eigenvalues' derivative, in reverse mode.

A rod (mass m, centroidal J, centre ρ from the pin) with a torsion spring k (free angle φ₀)
rests where m g ρ cos φ* + k (φ* − φ₀) = 0, so dφ*/dk = −(φ* − φ₀) / K with the stiffness
K = k − m g ρ sin φ* about it; it swings at ω = √(K / J_O), J_O = J + m ρ², and

    dω/dk = (1 − m g ρ cos φ* · dφ*/dk) / (2 J_O ω).
"""

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import brentq

import jaxmbs
from jaxmbs.model.joints import forces, planar

M, G, RHO, J = 1.0, 9.81, 0.5, 1.0 / 12


def torsion_pendulum(phi0: float) -> jaxmbs.Mechanism:
    """The rod pinned at its end (absolute coordinates x, y, φ), the spring's k a parameter."""
    spring = forces.RotationalSpringDamper(
        "torsion", stiffness="k", damping=0.0, free_angle=phi0, body_i=None, body_j=0
    )
    mech = planar.planar_mechanism(
        [planar.Body("rod", M, J)], [planar.Revolute("pivot", 0, (-RHO, 0.0))], {"k": 20.0},
        elements=[spring],
    )  # fmt: skip
    return mech.with_structure(np.array([RHO, 0.0, 0.0]))


def test_frequency_gradient_through_the_equilibrium(record_property):
    k, phi0, h = 20.0, 0.4, 1e-4
    mech = torsion_pendulum(phi0)
    guess = np.array([RHO, 0.0, 0.0])

    def frequency(k):
        q = jaxmbs.equilibrium(mech, guess, params={"k": k})
        return jaxmbs.linearize(mech, q, jnp.zeros(3), params={"k": k}).frequencies[0]

    gradient = float(jax.grad(frequency)(k))
    phi = brentq(lambda f: M * G * RHO * np.cos(f) + k * (f - phi0), -np.pi / 2, np.pi / 2)
    stiffness, inertia = k - M * G * RHO * np.sin(phi), J + M * RHO**2
    omega = np.sqrt(stiffness / inertia)
    dphi = -(phi - phi0) / stiffness
    analytic = (1 - M * G * RHO * np.cos(phi) * dphi) / (2 * inertia * omega)
    central = float((frequency(k + h) - frequency(k - h)) / (2 * h))
    record_property("torsion_frequency_gradient_error", abs(gradient - analytic) / analytic)
    record_property(
        "torsion_frequency_central_difference_error", abs(gradient - central) / analytic
    )
    assert abs(gradient - analytic) < 1e-10 * analytic
    assert abs(gradient - central) < 1e-8 * analytic
