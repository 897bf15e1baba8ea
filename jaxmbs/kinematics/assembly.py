"""Consistent initial conditions: position Newton on Φ, then velocity projection.

Positions: Newton–Raphson with minimum-norm steps on the (possibly redundant) system

    Φ(q, t0) = 0,    q_F = q_F,guess  (the coordinates held `fixed`),

Δq = −J⁺ Φ̃ with J⁺ the pseudoinverse, so redundant or duplicated constraints need no
special treatment. Velocities: the minimum-norm correction of q̇_guess that satisfies
C q̇ + b = 0 and keeps the fixed coordinates' velocities (one linear solve; c is linear in q̇).
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.checks import coordinate_indices
from .._internal.types import Array, ArrayLike, Model, Params
from .constraints import constraint_jacobian, position_residual, velocity_residual

#: Newton steps at most after |Φ| ≤ tol, each taken only while it halves |Φ|.
POLISH_STEPS = 3


def assemble(
    mechanism: Model,
    q_guess: ArrayLike,
    qd_guess: ArrayLike | None = None,
    t0: float = 0.0,
    *,
    params: Params | None = None,
    fixed: Sequence[int | str] = (),
    tol: float | None = None,
    max_iterations: int = 50,
) -> tuple[Array, Array]:
    """Make (q, q̇) consistent with the holonomic and Pfaffian constraints at t0.

    **Arguments:**

    - `mechanism`: the mechanism.
    - `q_guess`: a concrete approximate configuration, shape (n,).
    - `qd_guess`: approximate velocities (default zero).
    - `t0`: time.
    - `params`: parameters (default the mechanism's).
    - `fixed`: coordinates (indices or names) whose guessed position and velocity are kept
      (returned exactly as given), e.g. a crank angle and speed.
    - `tol`: the largest accepted |Φ| (default 1000 ε max(1, |q|)); below it, Newton goes on
      while each step halves |Φ| (at most `POLISH_STEPS`), so q0 is assembled to round-off.
    - `max_iterations`: Newton iteration limit.

    **Returns:** `(q0, qd0)`. Raises `ValueError` with the residual when Newton does not
    converge (e.g. a configuration that cannot be assembled).
    """
    params = mechanism.params if params is None else params
    q, qd = _checked_guesses(mechanism.n, q_guess, qd_guess)
    idx = tuple(int(i) for i in coordinate_indices(mechanism, fixed))
    t0 = jnp.asarray(t0, q.dtype)
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, q.dtype), params)  # traced
    q_fixed = q[np.asarray(idx, dtype=int)]
    if tol is None:
        tol = 1000 * float(jnp.finfo(q.dtype).eps) * max(1.0, float(jnp.max(jnp.abs(q))))

    err = float("inf")
    for _ in range(max_iterations):
        q_new, err = _newton_step(mechanism, q, t0, params, idx, q_fixed)
        err = float(err)
        if not np.isfinite(err):
            break
        if err <= tol:
            break
        q = q_new
    if not err <= tol:
        raise ValueError(
            f"assemble: position Newton did not converge: |Φ| = {err:.3e} > tol = {tol:.1e} "
            f"after {max_iterations} iterations (the guess may be too far from an assembly, "
            "or the fixed coordinates may be incompatible with the constraints)"
        )
    # Below tol, Newton still converges quadratically: take the steps that keep halving |Φ|
    # (in float32, 1000 ε is ~1e-4, far above what `simulate` accepts as consistent).
    for _ in range(POLISH_STEPS):
        q_next, err_new = _newton_step(mechanism, q_new, t0, params, idx, q_fixed)
        if not float(err_new) < 0.5 * err:
            break
        q, err, q_new = q_new, float(err_new), q_next

    # The minimum-norm steps hold the fixed coordinates only to round-off: return the
    # guessed positions and velocities of the fixed coordinates exactly.
    index = np.asarray(idx, dtype=int)
    q = q.at[index].set(q_fixed)
    qd_fixed = qd[index]
    qd = _velocity_correction(mechanism, q, qd, t0, params, idx)
    return q, qd.at[index].set(qd_fixed)


def _checked_guesses(n: int, q_guess: ArrayLike, qd_guess: ArrayLike | None):
    """The guesses as floating arrays of shape (n,) (q̇: zero by default), refused where
    traced (`assemble` runs outside jit) or not finite."""
    q = jnp.asarray(q_guess)
    if not jnp.issubdtype(q.dtype, jnp.floating):
        q = q.astype(jnp.result_type(float))
    if q.shape != (n,):
        raise ValueError(f"q_guess must have shape ({n},), got {q.shape}")
    if isinstance(q, jax.core.Tracer):
        raise ValueError("assemble runs outside jit: q_guess must be concrete")
    if not bool(jnp.all(jnp.isfinite(q))):
        raise ValueError("q_guess is not finite")
    qd = jnp.zeros_like(q) if qd_guess is None else jnp.asarray(qd_guess, q.dtype)
    if qd.shape != (n,):
        raise ValueError(f"qd_guess must have shape ({n},), got {qd.shape}")
    if not bool(jnp.all(jnp.isfinite(qd))):
        raise ValueError("qd_guess is not finite")
    return q, qd


def _constraints_and_fixed(mechanism: Model, q: Array, t0, params, idx: tuple[int, ...]):
    """The Jacobian of [Φ ; ψ ; q_F] with respect to q (or q̇): [C ; rows of I]."""
    selector = jnp.eye(mechanism.n, dtype=q.dtype)[np.asarray(idx, dtype=int)]
    return jnp.concatenate([constraint_jacobian(mechanism, q, t0, params), selector])


# Compiled once per mechanism and set of fixed coordinates (the mechanism's functions are
# static), so repeated assemblies of one model reuse them.
@eqx.filter_jit
def _newton_step(mechanism: Model, q: Array, t0, params, idx: tuple[int, ...], q_fixed):
    """q − J⁺[Φ ; q_F − q_F,guess] with J the holonomic rows and the fixed coordinates, and
    max |residual| at q."""
    index = np.asarray(idx, dtype=int)
    r = jnp.concatenate([position_residual(mechanism, q, t0, params), q[index] - q_fixed])
    J = _constraints_and_fixed(mechanism, q, t0, params, idx)
    J = jnp.concatenate([J[: mechanism.n_holonomic], J[J.shape[0] - len(idx) :]])
    return q - jnp.linalg.pinv(J) @ r, jnp.max(jnp.abs(r), initial=0.0)


@eqx.filter_jit
def _velocity_correction(mechanism: Model, q: Array, qd: Array, t0, params, idx):
    """The minimum-norm correction of q̇ onto C q̇ + b = 0 with the fixed velocities kept."""
    J = _constraints_and_fixed(mechanism, q, t0, params, idx)
    residual = jnp.concatenate(
        [velocity_residual(mechanism, q, qd, t0, params), jnp.zeros(len(idx), q.dtype)]
    )
    return qd - jnp.linalg.pinv(J) @ residual
