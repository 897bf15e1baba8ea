"""Static equilibrium: the configuration where the applied forces balance the constraint
reactions.

At rest (q̇ = 0, q̈ = 0) the equations of motion M q̈ + Cᵀλ = Q and Φ = 0 become

    Q(t, q, 0, p) − C_Iᵀ(q) λ_I = 0,        Φ_I(t, q) = 0,

n + r equations in (q, λ_I), with I the independent holonomic rows (redundant rows left out:
their multipliers are not unique, the configuration is). Newton's method on this square
system (`optimistix.Newton`, the exact Jacobian by autodiff) from a guess; the derivative
with respect to the parameters follows from the implicit function theorem (optimistix's
implicit adjoint), so `jax.grad` of a function of the equilibrium needs no unrolled
iterations.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._internal.checks import is_concrete
from .._internal.types import Array, Coordinates, Params
from ..kinematics.constraints import constraint_jacobian, position_residual
from ..kinematics.structure import resolve_structure
from ..model.mechanism import Mechanism


def equilibrium(
    mechanism: Mechanism,
    q_guess: Coordinates,
    t=0.0,
    params: Params | None = None,
    *,
    tol: float = 1e-12,
    max_steps: int = 50,
) -> Array:
    """The static equilibrium configuration near `q_guess` (module docstring).

    **Arguments:** the mechanism, a guess (need not satisfy Φ = 0), the time, parameters
    (default: the mechanism's; differentiable), the Newton tolerance `tol` (on the step and on
    the residual, relative to their scales) and the iteration limit.

    **Returns:** q with Φ(q) = 0 to round-off and Q = Cᵀλ. Raises `RuntimeError` when Newton's
    method does not converge (with concrete inputs); under `jit` the result is NaN instead.
    Pfaffian constraints do not fix an equilibrium (rest satisfies them whatever q is), so a
    mechanism with them is refused.
    """
    if mechanism.n_pfaffian:
        raise ValueError(
            "equilibrium: a mechanism with Pfaffian constraints has no isolated equilibrium "
            "(rest satisfies ψ = 0 in every configuration)"
        )
    q_guess = jnp.asarray(q_guess, dtype=jnp.result_type(float))
    if q_guess.shape != (mechanism.n,):
        raise ValueError(f"q_guess must have shape ({mechanism.n},), got {q_guess.shape}")
    structure = resolve_structure(mechanism, q_guess if is_concrete(q_guess) else None, t)
    rows = np.asarray(structure.independent_holonomic_rows, dtype=int)
    p = mechanism.params if params is None else params
    n = mechanism.n

    def residual(y, p):
        q, lam = y[:n], y[n:]
        C = constraint_jacobian(mechanism, q, t, p)[rows]
        Q = mechanism.forces(t, q, jnp.zeros_like(q), p)
        return jnp.concatenate([Q - C.T @ lam, position_residual(mechanism, q, t, p)[rows]])

    y0 = jnp.concatenate([q_guess, jnp.zeros(rows.size, q_guess.dtype)])
    solution = optx.root_find(
        residual, optx.Newton(rtol=tol, atol=tol), y0, p, max_steps=max_steps, throw=False
    )
    converged = solution.result == optx.RESULTS.successful
    q = solution.value[:n]
    if is_concrete(converged) and not bool(converged):
        left = float(jnp.max(jnp.abs(residual(solution.value, p))))
        raise RuntimeError(
            f"equilibrium did not converge in {max_steps} Newton steps (largest residual "
            f"{left:.2e}); try a guess nearer the equilibrium, or more steps"
        )
    return jnp.where(converged, q, jnp.nan)


def equilibrium_multipliers(
    mechanism: Mechanism, q: Coordinates, t=0.0, params: Params | None = None
) -> Array:
    """λ of the independent holonomic rows at an equilibrium q (least squares of Cᵀλ = Q):
    the static constraint reactions."""
    structure = resolve_structure(mechanism, q if is_concrete(q) else None, t)
    rows = np.asarray(structure.independent_holonomic_rows, dtype=int)
    p = mechanism.params if params is None else params
    C = constraint_jacobian(mechanism, q, t, p)[rows]
    Q = mechanism.forces(t, q, jnp.zeros_like(q), p)
    return jnp.linalg.lstsq(C.T, Q)[0]
