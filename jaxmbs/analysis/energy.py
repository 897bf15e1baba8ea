"""Whether a run conserves energy: the physical rate dE/dt along a [`jaxmbs.Solution`][].

From M q̈ + Cᵀλ = Q, the rate of E = ½q̇ᵀMq̇ + V at a state is
∂E/∂q q̇ + ∂E/∂q̇ q̈ = q̇ᵀQ_nc − λᵀ(c − a): the power of the non-conservative forces (dampers,
force laws, applied forces), of rheonomic (driving) constraints λᵀa (a = Φ_t, or the
Pfaffian a(q, t)), and −λᵀc of the constraint residual c = C q̇ + a, an artefact of the
numerics. `energy_rate` adds λᵀc back: what remains is physics, free of the integration
error and of the residuals. In a conservative system it is round-off in the cancellation
of dT/dt, dV/dt and λᵀc (measured ~1e-15 of their size in float64 and ~1e-6 in float32 on
the pendulums, four-bar and slider-crank), in a driven or damped one a sizeable part of
them (0.7–1 on the driven slider-crank and the steered mobile robot): `conserves_energy`
tells drift from physics by that ratio.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.compile import quick_jit
from .._internal.types import Array, Params
from ..integrate.inputs import merge_params
from ..kinematics.constraints import velocity_residual
from ..model.mechanism import Mechanism


def power_terms(mechanism: Mechanism, solution, params: Params) -> Array:
    """Per output time: dT/dt, dV/dt and λᵀc, shape (T, 3) (module docstring); one compiled
    program (`quick_jit`: run once per call; op by op it took ~0.2 s on a spatial model)."""
    s = solution
    p = merge_params(params, None, s.q.dtype)  # every leaf an array: traced, not baked in
    return _power_terms(mechanism, s.ts, s.q, s.qd, s.qdd, s.multipliers, p)


@quick_jit
def _power_terms(mechanism: Mechanism, ts, q, qd, qdd, lam, params) -> Array:
    def terms(t, q, qd, qdd, lam):
        _, de = jax.jvp(lambda q_, qd_: mechanism.energy(q_, qd_, params), (q, qd), (qd, qdd))
        _, dv = jax.jvp(lambda q_: mechanism.potential_energy(q_, params), (q,), (qd,))
        return jnp.stack([de - dv, dv, lam @ velocity_residual(mechanism, q, qd, t, params)])

    return jax.vmap(terms)(ts, q, qd, qdd, lam)


def energy_rate(mechanism: Mechanism, solution, params: Params | None = None) -> Array:
    """The physical rate q̇ᵀQ_nc + λᵀa = dT/dt + dV/dt + λᵀc at the output times (one jvp
    per time; module docstring), shape (T,)."""
    if mechanism.potential_energy is None:
        raise ValueError("energy_rate needs the mechanism's potential_energy")
    p = mechanism.params if params is None else params
    return jnp.sum(power_terms(mechanism, solution, p), axis=1)


def conserves_energy(
    mechanism: Mechanism,
    solution,
    params: Params | None = None,
    rtol: float | None = None,
) -> bool:
    """Whether the energy is conserved along the run: ∫|dE/dt| dt of the physical rate is at
    most `rtol` times ∫(|dT/dt| + |dV/dt| + |λᵀc|) dt, the power its terms exchange, so that
    what remains is round-off in their cancellation (trapezoidal rule over the output times
    reached). Default `rtol`: 10 √ε of the solution's dtype (1.5e-7 in float64, 3.5e-3 in
    float32). False where the mechanism has no potential energy."""
    if mechanism.potential_energy is None:
        return False
    p = mechanism.params if params is None else params
    terms = power_terms(mechanism, solution, p)
    return bool(energy_balance_holds(solution.ts, solution.t_final, terms, rtol))


def energy_balance_holds(ts, t_final, terms, rtol: float | None = None) -> np.ndarray:
    """`conserves_energy`'s criterion from the power terms of `power_terms`, over any leading
    (sample) axes: `ts` (..., T), `t_final` (...), `terms` (..., T, 3); the trapezoidal rule
    over the output times reached (t ≤ t_final, a prefix). **Returns:** a bool array (...)."""
    ts, terms = np.asarray(ts), np.asarray(terms)
    if rtol is None:
        rtol = 10 * float(np.sqrt(np.finfo(terms.dtype).eps))
    reached = ts <= np.asarray(t_final)[..., None]

    def integral(values):
        trapezoids = np.diff(ts, axis=-1) * (values[..., 1:] + values[..., :-1]) / 2
        return np.sum(np.where(reached[..., 1:], trapezoids, 0.0), axis=-1)

    return integral(np.abs(terms.sum(axis=-1))) <= rtol * integral(np.abs(terms).sum(axis=-1))
