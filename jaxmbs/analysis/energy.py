"""Whether a run conserves energy: the rate dE/dt along a [`jaxmbs.Solution`][].

Along the exact motion, dE/dt = q̇ᵀQ_nc + λᵀΦ_t: the power of the non-conservative forces
(dampers, force laws, applied forces) and of rheonomic (driving) constraints; ideal
scleronomic constraints do no work. Evaluated at the stored states (q, q̇, q̈) it is free of
the integration error, so it tells a conservative system (rate ≈ 0, and any change of E is
drift) from one whose energy changes by physics.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Array, Params
from ..model.mechanism import Mechanism

#: Relative size of ∫|dE/dt| dt against the energy scale below which a run is conservative.
CONSERVATIVE_RTOL = 1e-6


def energy_rate(mechanism: Mechanism, solution, params: Params | None = None) -> Array:
    """dE/dt = ∂E/∂q q̇ + ∂E/∂q̇ q̈ at the output times (one jvp per time), shape (T,)."""
    if mechanism.potential_energy is None:
        raise ValueError("energy_rate needs the mechanism's potential_energy")
    p = mechanism.params if params is None else params

    def rate(q, qd, qdd):
        return jax.jvp(lambda q_, qd_: mechanism.energy(q_, qd_, p), (q, qd), (qd, qdd))[1]

    return jax.vmap(rate)(solution.q, solution.qd, solution.qdd)


def conserves_energy(
    mechanism: Mechanism,
    solution,
    params: Params | None = None,
    rtol: float = CONSERVATIVE_RTOL,
) -> bool:
    """Whether the energy is conserved along the run: ∫|dE/dt| dt (trapezoidal over the
    output times reached) is at most `rtol` times the energy scale max(|E₀|, max T), with T
    the kinetic energy. False where the mechanism has no potential energy."""
    if mechanism.potential_energy is None:
        return False
    p = mechanism.params if params is None else params
    reached = np.asarray(solution.ts) <= float(solution.t_final)
    ts, energy = np.asarray(solution.ts)[reached], np.asarray(solution.energy)[reached]
    rate = np.abs(np.asarray(energy_rate(mechanism, solution, p)))[reached]
    kinetic = energy - np.asarray(
        jax.vmap(lambda q: mechanism.potential_energy(q, p))(jnp.asarray(solution.q)[reached])
    )
    scale = max(abs(float(energy[0])), float(np.max(np.abs(kinetic))))
    work = float(np.sum(np.diff(ts) * (rate[1:] + rate[:-1]) / 2)) if ts.size > 1 else 0.0
    return work <= rtol * scale
