"""Consistent initial conditions: position Newton on Φ, then velocity projection — one
assembly, driven two ways.

Positions: Newton–Raphson with minimum-norm steps on the rows R of Φ together with the
coordinates held `fixed`,

    r(q) = [Φ_R(q, t0) ; q_F − q_F,guess],    J = [Φ_q,R ; E_F],    Δq = −J⁺ r;

velocities: the minimum-norm correction of q̇_guess onto C_R q̇ + b_R = 0 that keeps the
fixed coordinates' velocities (one linear solve; c is linear in q̇). Two drivers share the
step (`_position_step`, `_velocity_correction`):

- `assemble`, outside jit on concrete guesses: every row of Φ and C (R = all), J⁺ the
  pseudoinverse, so redundant or duplicated constraints and a guess where they are not yet
  redundant need no special treatment; iterated until |r| ≤ tol, refused otherwise.
- `consistent_state`, inside jit and grad: the structure's independent rows (J has full
  row rank) and J⁺r = Jᵀ(JJᵀ)⁻¹r, a fixed number of iterations, and the implicit-function
  derivative of the root where the fixed coordinates complete R to a square J.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.checks import coordinate_indices
from .._internal.compile import quick_jit
from .._internal.types import Array, ArrayLike, Model, Params
from .constraints import constraint_jacobian, position_residual, velocity_residual

#: `(J, r) -> J⁺r`, the minimum-norm solution of J Δ = r.
MinimumNorm = Callable[[Array, Array], Array]


def _pseudoinverse(J: Array, r: Array) -> Array:
    """J⁺r by the pseudoinverse, whatever J's rank (`assemble`)."""
    return jnp.linalg.pinv(J) @ r


def _normal_equations(J: Array, r: Array) -> Array:
    """J⁺r = Jᵀ(JJᵀ)⁻¹r for J of full row rank (the structure's independent rows): one
    small solve, cheap to differentiate."""
    return J.T @ jnp.linalg.solve(J @ J.T, r)


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

    holonomic = tuple(range(mechanism.n_holonomic))

    def newton_step(q):
        return _assemble_step(mechanism, q, t0, params, holonomic, idx, q_fixed, _pseudoinverse)

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
    # Below tol, Newton still converges quadratically: take the steps that keep halving |Φ|
    # (in float32, 1000 ε is ~1e-4, far above what `simulate` accepts as consistent).
    for _ in range(POLISH_STEPS):
        q_next, err_new = newton_step(q_new)
        if not float(err_new) < 0.5 * err:
            break
        q, err, q_new = q_new, float(err_new), q_next

    # The minimum-norm steps hold the fixed coordinates only to round-off: return the
    # guessed positions and velocities of the fixed coordinates exactly.
    q = q.at[np.asarray(idx, dtype=int)].set(q_fixed)
    qd = _assemble_velocities(mechanism, q, qd, t0, params, None, idx, _pseudoinverse)
    return q, qd


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


def _with_fixed(J: Array, idx: tuple[int, ...]) -> Array:
    """[J ; E_F]: J with the rows of the identity of the fixed coordinates below."""
    return jnp.concatenate([J, jnp.eye(J.shape[1], dtype=J.dtype)[np.asarray(idx, dtype=int)]])


def _position_step(
    mechanism: Model, q: Array, t0, params, rows: tuple[int, ...], idx: tuple[int, ...],
    q_fixed: Array, min_norm: MinimumNorm,
) -> tuple[Array, Array]:  # fmt: skip
    """q − J⁺r (module notes) on the holonomic `rows`, and max |r| at q."""
    index = np.asarray(idx, dtype=int)
    R = np.asarray(rows, dtype=int)
    r = jnp.concatenate([position_residual(mechanism, q, t0, params)[R], q[index] - q_fixed])
    J = _with_fixed(constraint_jacobian(mechanism, q, t0, params)[R], idx)
    return q - min_norm(J, r), jnp.max(jnp.abs(r), initial=0.0)


def _velocity_correction(
    mechanism: Model, q: Array, qd: Array, t0, params, rows: tuple[int, ...] | None,
    idx: tuple[int, ...], min_norm: MinimumNorm,
) -> Array:  # fmt: skip
    """The minimum-norm correction of q̇ onto C_R q̇ + b_R = 0 (R: `rows`, None for all of
    them), the fixed velocities kept."""
    R = slice(None) if rows is None else np.asarray(rows, dtype=int)
    index = np.asarray(idx, dtype=int)
    c = velocity_residual(mechanism, q, qd, t0, params)[R]
    J = _with_fixed(constraint_jacobian(mechanism, q, t0, params)[R], idx)
    qd_new = qd - min_norm(J, jnp.concatenate([c, jnp.zeros(len(idx), q.dtype)]))
    return qd_new.at[index].set(qd[index])  # held to round-off by the step: exactly


# Compiled once per mechanism, rows and fixed coordinates (static), so repeated assemblies
# of one model reuse them; with XLA's quick settings (`quick_jit`): each runs in a Python
# loop of a few Newton steps, where compiling is the cost.
_assemble_step = quick_jit(_position_step)
_assemble_velocities = quick_jit(_velocity_correction)


def consistent_state(
    mechanism: Model,
    q_guess: ArrayLike,
    qd_guess: ArrayLike,
    t0: float = 0.0,
    *,
    params: Params | None = None,
    fixed: Sequence[int | str] = (),
    iterations: int = 8,
) -> tuple[Array, Array]:
    """Consistent (q0, q̇0) near a guess, differentiable and usable under `jit`/`vmap`.

    The assembly of the module notes with R = I, the structure's independent rows (so
    redundant rows are harmless): Newton–Raphson with minimum-norm steps Δq = −Jᵀ(JJᵀ)⁻¹ r
    on Φ_I(q, t0) = 0 together with q_F = q_F,guess for the `fixed` coordinates
    (J = [Φ_q,I ; E_F]), for a fixed number of `iterations`; then the minimum-norm velocity
    correction onto C_I q̇ + b_I = 0 that keeps the fixed velocities.

    Derivative of the positions. When the fixed coordinates complete the independent
    constraints to a square J (|I| + |F| = n: the fixed coordinates are a set of
    independent coordinates), the assembled q* is the locally unique root of
    [Φ_I(q, t0; θ) ; q_F − q_F,guess] = 0, and its derivative is the implicit-function one,

        J dq* = [−Φ_I,θ dθ − Φ_I,t dt0 ; dq_F,guess],

    one linear solve at q* instead of differentiating every iteration (no second
    derivatives of Φ, a shorter program under reverse mode). Otherwise q* depends on the
    whole guess through the iterations, which are differentiated as they run.

    **Arguments:** as [`jaxmbs.assemble`][]; `q_guess` must lie in the basin of the wanted
    assembly branch (e.g. the assembled state of a nearby design).

    **Returns:** `(q0, qd0)`; check `position_residual` if convergence is in doubt.
    """
    if isinstance(t0, Mapping):
        raise TypeError(
            "consistent_state(mechanism, q_guess, qd_guess, t0, *, params=...): the fourth "
            "argument is the time, as in assemble; pass the parameters as params="
        )
    params = mechanism.params if params is None else params
    structure = mechanism.structure
    if structure is None:
        raise ValueError("consistent_state needs a mechanism with a structure (reference_q=...)")
    q = jnp.asarray(q_guess)
    qd = jnp.asarray(qd_guess, q.dtype)
    if q.shape != (mechanism.n,) or qd.shape != (mechanism.n,):
        raise ValueError(
            f"q_guess and qd_guess must have shape ({mechanism.n},), got {q.shape}, {qd.shape}"
        )
    t0 = jnp.asarray(t0, q.dtype)
    params = jax.tree_util.tree_map(jnp.asarray, params)
    idx = tuple(int(i) for i in coordinate_indices(mechanism, fixed))
    hol = structure.independent_holonomic_rows

    def assembled(q_guess, t, p):
        q_fixed = q_guess[np.asarray(idx, dtype=int)]

        def newton(q_, _):
            step = _position_step(mechanism, q_, t, p, hol, idx, q_fixed, _normal_equations)
            return step[0], None

        q_, _ = jax.lax.scan(newton, q_guess, None, length=iterations)
        return q_.at[np.asarray(idx, dtype=int)].set(q_fixed)  # to round-off: exactly

    if len(hol) + len(idx) == mechanism.n:
        assembled = _implicit_derivative(assembled, mechanism, hol, idx)
    q = assembled(q, t0, params)
    rows = structure.independent_rows
    return q, _velocity_correction(mechanism, q, qd, t0, params, rows, idx, _normal_equations)


def _implicit_derivative(
    assembled: Callable[[Array, Array, Params], Array],
    mechanism: Model,
    hol: tuple[int, ...],
    idx: tuple[int, ...],
) -> Callable[[Array, Array, Params], Array]:
    """`assembled(q_guess, t, params)` with the implicit-function derivative of its root
    (see `consistent_state`); J = [Φ_q,I ; E_F] is square there."""
    assembled = jax.custom_jvp(assembled)

    @assembled.defjvp
    def _jvp(primals, tangents):
        q_guess, t, params = primals
        dq_guess, dt, dparams = tangents
        q = assembled(q_guess, t, params)
        rows = np.asarray(hol, dtype=int)
        _, dphi = jax.jvp(
            lambda t_, p_: position_residual(mechanism, q, t_, p_)[rows], (t, params), (dt, dparams)
        )
        rhs = jnp.concatenate([-dphi, dq_guess[np.asarray(idx, dtype=int)]])
        J = _with_fixed(constraint_jacobian(mechanism, q, t, params)[rows], idx)
        return q, jnp.linalg.solve(J, rhs)

    return assembled
