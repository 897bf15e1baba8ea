"""A stiff pendulum: a rod pinned to the ground and a bob that slides along it on a stiff
spring-damper (planar, n = 6, m = 4, two degrees of freedom).

Rod: l = 1 m, 1 kg, J = m l²/12, along its local x axis, pinned at its end to the ground
origin (revolute "pivot"). Bob: 1 kg, J = 10⁻³ kg m², centre on the rod's axis and turning
with it (translational "slide"). Spring-damper "spring" from the pivot to the bob's centre:
k = 8·10⁵ N/m, c = 4·10⁴ N s/m, free length l. Gravity along −y.

Along the rod the bob obeys m ẍ + c ẋ + k x = (gravity and centrifugal terms), with the
roots s ≈ −k/c = −20 s⁻¹ (slow) and s ≈ −c/m = −4·10⁴ s⁻¹ (fast) at rest: an explicit
method's step is bounded by the fast root long after that mode has died out — the stiff
case for an implicit solver (`diffrax.Kvaerno5`).
"""

from __future__ import annotations

import numpy as np

import jaxmbs
from jaxmbs.model.joints import forces, planar

from ._cache import cached

DEFAULTS = {"l": 1.0, "m_rod": 1.0, "m_bob": 1.0, "J_bob": 1e-3, "k": 8e5, "c": 4e4, "g": 9.81}


@cached
def spring_pendulum(**params: float) -> jaxmbs.Mechanism:
    """The stiff pendulum; keyword arguments override `DEFAULTS`."""
    p = {**DEFAULTS, **params}
    bodies = [
        planar.Body("rod", "m_rod", lambda p: p["m_rod"] * p["l"] ** 2 / 12),
        planar.Body("bob", "m_bob", "J_bob"),
    ]
    pivot = lambda p: (-p["l"] / 2, 0.0)  # noqa: E731
    joints = [
        planar.Revolute("pivot", 0, pivot),
        planar.Translational("slide", 0, pivot, (1.0, 0.0), 1),
    ]
    elements = [
        forces.SpringDamper(
            "spring", stiffness="k", damping="c", body_i=0, point_i=pivot, body_j=1,
            free_length="l",
        )
    ]  # fmt: skip
    mech = planar.planar_mechanism(
        bodies, joints, p, gravity=lambda p: (0.0, -p["g"]), elements=elements
    )
    return mech.with_structure(_configuration(p, -0.5))


def _configuration(p: dict, angle: float) -> np.ndarray:
    """Rod at `angle` from the +x axis, bob at the free length (spring relaxed)."""
    u = np.array([np.cos(angle), np.sin(angle)])
    return np.array([*(p["l"] / 2 * u), angle, *(p["l"] * u), angle])


def initial_state(mechanism: jaxmbs.Mechanism, angle: float = -0.5, rate: float = 0.0):
    """Consistent (q0, q̇0): the rod at `angle`, turning at `rate`, the spring relaxed and the
    bob at rest along the rod."""
    p = {k: float(v) for k, v in mechanism.params.items()}
    q = _configuration(p, angle)
    n = np.array([-np.sin(angle), np.cos(angle)])
    qd = np.array([*(p["l"] / 2 * rate * n), rate, *(p["l"] * rate * n), rate])
    return jaxmbs.assemble(mechanism, q, qd, fixed=("rod.phi",))
