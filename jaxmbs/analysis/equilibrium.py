"""Static equilibrium: the configuration where the applied forces balance the constraint
reactions.

At rest (q̇ = 0, q̈ = 0) the equations of motion M q̈ + Cᵀλ = Q and Φ = 0 become

    R(q, λ) = [ (Q(t, q, 0, p) − C_Iᵀ(q) λ_I) / s_Q ;  Φ_I(t, q) ] = 0,

n + r equations in (q, λ_I), with I the independent holonomic rows (redundant rows left out:
their multipliers are not unique, the configuration is) and s_Q a constant force scale (the
largest applied force at the start, held fixed: the root does not depend on it, and it makes
the tolerance relative on the force rows). The Jacobian of R is the bordered stiffness

    ∂R/∂(q, λ) = [ (K_t − Σ_k λ_k ∂²Φ_k/∂q²) / s_Q    −C_Iᵀ / s_Q ]
                 [ C_I                                  0         ],   K_t = ∂Q/∂q,

nonsingular exactly where the equilibrium is isolated (the tangent stiffness projected on
the null space of C_I is). Its geometric part −Σ λ_k ∂²Φ_k/∂q² is what holds a
gravity-loaded pendulum or linkage without springs (K_t = 0): started from λ = 0, the
Jacobian would be singular there. So Newton's method (`optimistix.Newton`, the exact
Jacobian by autodiff) starts from

1. q₀: the guess moved onto Φ_I = 0 by `START_STEPS` minimum-norm Gauss–Newton steps
   q ← q − C_I⁺ Φ_I (a guess off the constraints is allowed);
2. λ₀: the least-squares multipliers of Q(q₀) = C_Iᵀ(q₀) λ, which are the equilibrium's own
   when q₀ is the equilibrium (Newton then stops at once), and a start whose geometric
   stiffness has the right sign near it.

The derivative with respect to the parameters follows from the implicit function theorem
(optimistix's implicit adjoint), so `jax.grad` of a function of the equilibrium needs no
unrolled iterations; the start is held constant in it (the root does not depend on it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._internal.checks import finite_params, is_concrete
from .._internal.compile import quick_jit
from .._internal.types import Array, Coordinates, Params
from ..integrate.inputs import merge_params
from ..kinematics.constraints import constraint_jacobian, position_residual
from ..kinematics.structure import resolve_structure
from ..model.mechanism import Mechanism

#: Gauss–Newton steps that move the guess onto the holonomic constraints before Newton.
START_STEPS = 4


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
    (default: the mechanism's; a partial mapping replaces only its keys, as in `simulate`;
    differentiable), the Newton tolerance `tol` (on the step relative to |q| and |λ|, and on
    the force balance relative to the largest applied force) and the iteration limit.

    **Returns:** q with Φ(q) = 0 to round-off and Q = Cᵀλ. Raises `RuntimeError` when Newton's
    method does not converge (with concrete inputs); under `jit` the result is NaN instead.
    A non-finite parameter or guess is refused with a `ValueError` naming it (concrete
    inputs). Pfaffian constraints do not fix an equilibrium (rest satisfies them whatever q
    is), so a mechanism with them is refused.
    """
    if mechanism.n_pfaffian:
        raise ValueError(
            "equilibrium: a mechanism with Pfaffian constraints has no isolated equilibrium "
            "(rest satisfies ψ = 0 in every configuration)"
        )
    q_guess = jnp.asarray(q_guess, dtype=jnp.result_type(float))
    if q_guess.shape != (mechanism.n,):
        raise ValueError(f"q_guess must have shape ({mechanism.n},), got {q_guess.shape}")
    if is_concrete(q_guess) and not bool(jnp.all(jnp.isfinite(q_guess))):
        raise ValueError("equilibrium: q_guess is not finite (NaN or inf)")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    if not 0.0 < tol < 1.0:
        raise ValueError(f"tol must lie in (0, 1), got {tol!r}")
    p = merge_params(mechanism.params, params, q_guess.dtype)
    finite_params(p)
    structure = resolve_structure(mechanism, q_guess if is_concrete(q_guess) else None, t)
    rows = tuple(int(r) for r in structure.independent_holonomic_rows)
    t = jnp.asarray(t, q_guess.dtype)
    q, converged, force_balance, drift, scale = _newton(
        mechanism, rows, q_guess, t, p, tol, max_steps
    )
    if is_concrete(converged) and not bool(converged):
        # Under jax.grad these are tracers of concrete values: their values, not tangents.
        force_balance, drift, scale = map(
            float, jax.lax.stop_gradient((force_balance, drift, scale))
        )
        raise RuntimeError(
            f"equilibrium did not converge in {max_steps} Newton steps: force balance "
            f"|Q − Cᵀλ| = {force_balance:.2e} (largest applied force {scale:.2e}), "
            f"|Φ| = {drift:.2e} — no isolated equilibrium near the guess (a neutral "
            "direction: a free rotation, a mechanism without restoring forces), or a guess "
            "too far from one"
        )
    return jnp.where(converged, q, jnp.nan)


# Compiled once per mechanism, rows and options: a design study calls it again and again.
# With XLA's quick settings (`quick_jit`): the quarter car's first call 16.6 → 10.5 s, later
# calls 8.1 → 9.6 ms (benchmarks/README.md, round 26).
@quick_jit
def _newton(
    mechanism: Mechanism, rows: tuple[int, ...], q_guess: Array, t: Array, p: Params,
    tol: float, max_steps: int,
) -> tuple[Array, Array, Array, Array, Array]:  # fmt: skip
    """Newton's method on R(q, λ) = 0 (module docstring) from `_start`: q, whether it
    converged, and at the last iterate max |Q − Cᵀλ|, max |Φ_I| and the force scale."""
    n, index = mechanism.n, np.asarray(rows, dtype=int)

    def forces(q, p):
        return mechanism.forces_at_rest(t, q, p)

    def jacobian(q, p):
        return constraint_jacobian(mechanism, q, t, p)[index]

    def phi(q, p):
        return position_residual(mechanism, q, t, p)[index]

    q0, lam0, scale = jax.lax.stop_gradient(_start(forces, jacobian, phi, q_guess, p))

    def residual(y, p):
        q, lam = y[:n], y[n:]
        return jnp.concatenate([(forces(q, p) - jacobian(q, p).T @ lam) / scale, phi(q, p)])

    solution = optx.root_find(
        residual,
        optx.Newton(rtol=tol, atol=tol),
        jnp.concatenate([q0, lam0]),
        p,
        max_steps=max_steps,
        throw=False,
    )
    r = residual(solution.value, p)
    return (
        solution.value[:n],
        solution.result == optx.RESULTS.successful,
        jnp.max(jnp.abs(r[:n])) * scale,
        jnp.max(jnp.abs(r[n:]), initial=0.0),
        scale,
    )


def _start(forces, jacobian, phi, q_guess: Array, p) -> tuple[Array, Array, Array]:
    """The start of Newton's method (module docstring): q₀ on Φ_I = 0, the least-squares
    λ₀ there, and the force scale s_Q = max |Q(q₀)| (at least the smallest normal number)."""

    def gauss_newton(q, _):
        return q - jnp.linalg.pinv(jacobian(q, p)) @ phi(q, p), None

    # Holonomic rows to satisfy and multipliers to start (their number, not traced values).
    rows = jax.eval_shape(phi, q_guess, p).shape[0]
    q0, lam0 = q_guess, jnp.zeros(0, q_guess.dtype)
    if rows:
        q0 = jax.lax.scan(gauss_newton, q_guess, None, length=START_STEPS)[0]
    Q = forces(q0, p)
    if rows:
        lam0 = jnp.linalg.lstsq(jacobian(q0, p).T, Q)[0]
    scale = jnp.maximum(jnp.max(jnp.abs(Q)), jnp.finfo(q0.dtype).tiny)
    return q0, lam0, scale


def equilibrium_multipliers(
    mechanism: Mechanism, q: Coordinates, t=0.0, params: Params | None = None
) -> Array:
    """λ of the independent holonomic rows at an equilibrium q (least squares of Cᵀλ = Q):
    the static constraint reactions; `params` as in `equilibrium`."""
    q = jnp.asarray(q, dtype=jnp.result_type(float))
    structure = resolve_structure(mechanism, q if is_concrete(q) else None, t)
    rows = np.asarray(structure.independent_holonomic_rows, dtype=int)
    p = merge_params(mechanism.params, params, q.dtype)
    C = constraint_jacobian(mechanism, q, t, p)[rows]
    Q = mechanism.forces_at_rest(t, q, p)
    return jnp.linalg.lstsq(C.T, Q)[0]
