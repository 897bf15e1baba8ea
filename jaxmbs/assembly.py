"""Consistent initial conditions: position Newton on Φ, then velocity projection.

Positions: Newton–Raphson with minimum-norm steps on the (possibly redundant) system

    Φ(q, t0) = 0,    q_F = q_F,guess  (the coordinates held `fixed`),

Δq = −J⁺ Φ̃ with J⁺ the pseudoinverse, so redundant or duplicated constraints need no
special treatment. Velocities: the minimum-norm correction of q̇_guess that satisfies
C q̇ + b = 0 and keeps the fixed coordinates' velocities (one linear solve; c is linear in q̇).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from ._types import Array, ArrayLike, Params
from .kinematics import constraint_jacobian, position_residual, velocity_residual

if TYPE_CHECKING:
    from .mechanism import Mechanism


def _fixed_indices(mechanism: Mechanism, fixed: Sequence[int | str]) -> np.ndarray:
    out = []
    for f in fixed:
        if isinstance(f, str):
            if f not in mechanism.coordinate_names:
                raise ValueError(f"unknown coordinate {f!r}; names: {mechanism.coordinate_names}")
            out.append(mechanism.coordinate_names.index(f))
        else:
            out.append(int(f))
    return np.asarray(out, dtype=int)


def assemble(
    mechanism: Mechanism,
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
    - `fixed`: coordinates (indices or names) whose guessed position and velocity are kept,
      e.g. a crank angle and speed.
    - `tol`: the largest accepted |Φ| (default 1000 ε max(1, |q|)).
    - `max_iterations`: Newton iteration limit.

    **Returns:** `(q0, qd0)`. Raises `ValueError` with the residual when Newton does not
    converge (e.g. a configuration that cannot be assembled).
    """
    params = mechanism.params if params is None else params
    n = mechanism.n
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
    idx = _fixed_indices(mechanism, fixed)
    selector = jnp.eye(n, dtype=q.dtype)[idx]
    q_fixed = q[idx]
    if tol is None:
        tol = 1000 * float(jnp.finfo(q.dtype).eps) * max(1.0, float(jnp.max(jnp.abs(q))))

    def residual(q_):
        return jnp.concatenate([position_residual(mechanism, t0, q_, params), q_[idx] - q_fixed])

    @jax.jit
    def newton_step(q_):
        r = residual(q_)
        jac = jnp.concatenate(
            [constraint_jacobian(mechanism, t0, q_, params)[: mechanism.n_holonomic], selector]
        )
        return q_ - jnp.linalg.pinv(jac) @ r, jnp.max(jnp.abs(r), initial=0.0)

    err = float("inf")
    for _ in range(max_iterations):
        q_new, err = newton_step(q)
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

    # Velocities: min-norm correction onto C q̇ + b = 0 with the fixed velocities kept.
    jac = jnp.concatenate([constraint_jacobian(mechanism, t0, q, params), selector])
    vel_res = jnp.concatenate(
        [velocity_residual(mechanism, t0, q, qd, params), jnp.zeros(len(idx), q.dtype)]
    )
    qd = qd - jnp.linalg.pinv(jac) @ vel_res
    return q, qd
