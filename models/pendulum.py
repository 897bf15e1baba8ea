"""Mathematical and physical pendulum (Blajer, Schiehlen, Schirm 1994, Fig. 1, eq 24).

Gravity acts along −y; the pivot is the origin. Hanging at rest is γ = −π/2.

- Mathematical: a particle G at q = [x, y], Φ = x² + y² − ρ² = 0.
- Physical: body G with q = [x, y, γ], Φ = [x − ρ cos γ, y − ρ sin γ] (its Jacobian is eq 24),
  M = diag(m, m, J) with J the centroidal moment of inertia.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.model.joints import cos_sin

from ._cache import cached

DEFAULTS = {"m": 1.0, "J": 0.05, "rho": 0.5, "g": 9.81}


@cached
def mathematical_pendulum(m: float = 1.0, rho: float = 1.0, g: float = 9.81) -> jaxmbs.Mechanism:
    """Particle on a massless rod of length ρ; params {"m", "rho", "g"}."""

    def mass_matrix(q, p):
        return p["m"] * jnp.eye(2, dtype=q.dtype)

    def forces(t, q, qd, p):
        return jnp.stack([jnp.zeros((), q.dtype), -p["m"] * p["g"]])

    def constraints(t, q, p):
        return jnp.atleast_1d(q @ q - p["rho"] ** 2)

    return jaxmbs.Mechanism(
        mass_matrix,
        forces,
        constraints,
        params={"m": m, "rho": rho, "g": g},
        coordinate_names=("x", "y"),
        constraint_groups={"rod": (0,)},
        potential_energy=lambda q, p: p["m"] * p["g"] * q[1],
        reference_q=np.array([rho * np.cos(-1.0), rho * np.sin(-1.0)]),
    )


@cached
def physical_pendulum(
    m: float = 1.0, J: float = 0.05, rho: float = 0.5, g: float = 9.81
) -> jaxmbs.Mechanism:
    """Rigid body pinned at distance ρ from its centre of mass; params {"m", "J", "rho", "g"}."""

    def mass_matrix(q, p):
        return jnp.diag(jnp.stack([p["m"], p["m"], p["J"]])).astype(q.dtype)

    def forces(t, q, qd, p):
        return jnp.stack([jnp.zeros((), q.dtype), -p["m"] * p["g"], jnp.zeros((), q.dtype)])

    def constraints(t, q, p):
        x, y, gamma = q
        c, s = cos_sin(gamma)
        return jnp.stack([x - p["rho"] * c, y - p["rho"] * s])

    return jaxmbs.Mechanism(
        mass_matrix,
        forces,
        constraints,
        params={"m": m, "J": J, "rho": rho, "g": g},
        coordinate_names=("x", "y", "gamma"),
        constraint_groups={"pivot": (0, 1)},
        potential_energy=lambda q, p: p["m"] * p["g"] * q[1],
        reference_q=np.array([rho * np.cos(-1.0), rho * np.sin(-1.0), -1.0]),
    )


def initial_state(mechanism: jaxmbs.Mechanism, amplitude: float):
    """At rest, deflected by `amplitude` (rad) from the hanging position."""
    rho = float(mechanism.params["rho"])
    gamma = -np.pi / 2 + amplitude
    q = [rho * np.cos(gamma), rho * np.sin(gamma)]
    if mechanism.n == 3:
        q.append(gamma)
    return jaxmbs.assemble(mechanism, np.array(q), np.zeros(mechanism.n))


def period(mechanism: jaxmbs.Mechanism) -> float:
    """Small-oscillation period 2π√((mρ² + J)/(m g ρ)) (J = 0 for the mathematical one)."""
    p = {k: float(v) for k, v in mechanism.params.items()}
    return (
        2
        * np.pi
        * np.sqrt((p["m"] * p["rho"] ** 2 + p.get("J", 0.0)) / (p["m"] * p["g"] * p["rho"]))
    )
