"""Checks of `simulate`'s arguments and of the initial state, shared by the integrators."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.checks import is_concrete
from .._internal.types import Array, Params
from ..kinematics import algebra
from ..kinematics.algebra import algebra_of
from ..kinematics.constraints import constraint_residuals

if TYPE_CHECKING:
    from ..model import Mechanism


def check_inputs(mechanism: Mechanism, q0, qd0, t_span, saveat):
    """q0, q̇0, t0, t1 and the output times as arrays of one float dtype, with their shapes
    checked (after `check_options`, before anything is traced)."""
    n = mechanism.n
    q0 = jnp.asarray(q0)
    qd0 = jnp.asarray(qd0)
    dtype = jnp.result_type(q0.dtype, qd0.dtype, float)
    q0, qd0 = q0.astype(dtype), qd0.astype(dtype)
    if q0.shape != (n,):
        raise ValueError(f"q0 must have shape ({n},) for this mechanism, got {q0.shape}")
    if qd0.shape != (n,):
        raise ValueError(f"qd0 must have shape ({n},) for this mechanism, got {qd0.shape}")
    t0, t1 = (jnp.asarray(t, dtype) for t in t_span)
    if saveat is not None:
        saveat = jnp.asarray(saveat, dtype)
        # The values are `check_options`'s; the shape is known even when traced.
        if saveat.ndim != 1 or saveat.shape[0] == 0:
            raise ValueError(f"saveat must be a non-empty 1-D array of times, got {saveat.shape}")
    return q0, qd0, t0, t1, saveat


def mass_matrix_checks(mechanism: Mechanism, q, params) -> tuple[Array, Array]:
    """(symmetric, positive definite) for M(q) (`matrix_checks`)."""
    return matrix_checks(mechanism, algebra.mass_matrix(mechanism, q, params))


def matrix_checks(mechanism: Mechanism, M: Array) -> tuple[Array, Array]:
    """(symmetric, positive definite) for a mass matrix M: |M − Mᵀ| ≤ 1e-10 max |M| (in
    float32, 100 ε = 1.2e-5 max |M|: an M by autodiff is symmetric to its round-off only),
    and a Cholesky factor with a finite, positive diagonal (`AbstractAlgebra.mass_pivots`:
    block by block where the structure is banded)."""
    pivots = algebra_of(mechanism).mass_pivots(M)
    definite = jnp.all(jnp.isfinite(pivots)) & jnp.all(pivots > 0)
    scale = jnp.max(jnp.abs(M), initial=1.0)
    tolerance = max(1e-10, 100 * float(jnp.finfo(M.dtype).eps))
    symmetric = jnp.max(jnp.abs(M - M.T), initial=0.0) <= tolerance * scale
    return symmetric, definite


def initial_checks(mechanism: Mechanism, q0, qd0, t0, params, tol: float) -> dict:
    """Checks of the initial state: finite, positive definite M, and consistent."""
    phi, c = constraint_residuals(mechanism, q0, qd0, t0, params)
    symmetric, mass_ok = mass_matrix_checks(mechanism, q0, params)
    err_phi = jnp.max(jnp.abs(phi), initial=0.0)
    err_c = jnp.max(jnp.abs(c), initial=0.0)
    finite = jnp.all(jnp.isfinite(q0)) & jnp.all(jnp.isfinite(qd0))
    # A non-finite parameter (e.g. a NaN force amplitude in a Monte Carlo batch) would only
    # show up as a failed step after max_steps; flag it at the start instead.
    for leaf in jax.tree_util.tree_leaves(params):
        finite = finite & jnp.all(jnp.isfinite(leaf))
    consistent = (err_phi <= tol) & (err_c <= tol)
    return {
        "finite": finite,
        "mass_ok": mass_ok,
        "symmetric": symmetric,
        "consistent": consistent,
        "ok": finite & mass_ok & symmetric & consistent,
        "err_phi": err_phi,
        "err_c": err_c,
    }


def raise_if_invalid(check: dict, tol: float) -> None:
    """Eager, informative errors for a concrete initial state."""
    if not bool(check["finite"]):
        raise ValueError("q0, qd0 or a parameter is not finite (NaN or inf)")
    if not bool(check["symmetric"]):
        raise ValueError("the mass matrix M(q0) is not symmetric (check mass_matrix)")
    if not bool(check["mass_ok"]):
        raise ValueError(
            "invalid parameters: the mass matrix M(q0) is not positive definite (a zero or "
            "negative mass or inertia?)"
        )
    if not bool(check["consistent"]):
        raise ValueError(
            f"inconsistent initial conditions: |Φ(q0)| = {float(check['err_phi']):.3e}, "
            f"|c(q0, q̇0)| = {float(check['err_c']):.3e} exceed consistency_tol = {tol:g}; "
            "use jaxmbs.assemble(mechanism, q_guess, qd_guess)"
        )


def _concrete_values(name: str, value) -> np.ndarray | None:
    """`value` as a NumPy array, or None when it is traced (checked at run time instead)."""
    if not is_concrete(value):
        return None
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {value!r}") from None


def check_options(
    *,
    t_span,
    saveat,
    rtol,
    atol,
    dt0,
    max_steps: int,
    rank_rtol: float | None,
    consistency_tol: float,
) -> None:
    """Reject invalid arguments of `simulate` before anything is traced, naming the argument:
    non-finite times, non-monotonic output times, negative tolerances, `rank_rtol` outside
    (0, 1), non-positive `max_steps`, `dt0` of the wrong sign."""
    if not isinstance(t_span, tuple | list) or len(t_span) != 2:
        raise ValueError(f"t_span must be (t0, t1), got {t_span!r}")
    times = [_concrete_values("t_span", t) for t in t_span]
    if any(t is not None and (t.shape != () or not np.isfinite(t)) for t in times):
        raise ValueError(f"t_span must hold two finite scalar times, got {t_span!r}")
    t0, t1 = times
    if t0 is not None and t1 is not None and not t1 > t0:
        raise ValueError(f"t_span = ({float(t0)}, {float(t1)}) must have t1 > t0")
    s = None if saveat is None else _concrete_values("saveat", saveat)
    if s is not None:
        if s.ndim != 1 or s.shape[0] == 0:
            raise ValueError(f"saveat must be a non-empty 1-D array of times, got {s.shape}")
        if not np.all(np.isfinite(s)):
            raise ValueError("saveat holds a NaN or infinite time")
        if np.any(np.diff(s) < 0):
            raise ValueError("saveat must be non-decreasing")
        # Compared in the output times' own precision (float32 linspace ends may round up).
        dtype = np.result_type(np.asarray(saveat).dtype, np.float32)
        if (
            t0 is not None
            and t1 is not None
            and (s[0] < t0.astype(dtype) or s[-1] > t1.astype(dtype))
        ):
            raise ValueError(f"saveat must lie within t_span = ({float(t0)}, {float(t1)})")
    for name, value in (("rtol", rtol), ("atol", atol), ("consistency_tol", consistency_tol)):
        v = _concrete_values(name, value)
        if v is not None and not (np.all(np.isfinite(v)) and np.all(v >= 0)):
            raise ValueError(f"{name} must be finite and non-negative, got {value!r}")
    if rank_rtol is not None and not 0.0 < rank_rtol < 1.0:
        raise ValueError(f"rank_rtol must lie in (0, 1), got {rank_rtol!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int | np.integer) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    h = None if dt0 is None else _concrete_values("dt0", dt0)
    if h is not None and not (h.shape == () and np.isfinite(h) and h > 0):
        raise ValueError(f"dt0 must be a positive finite step (t1 > t0), got {dt0!r}")


#: Tolerances below this many units of round-off (both rtol and atol) are refused: no step
#: of the run's precision can meet them, and the step size collapses after many steps.
UNREACHABLE_TOLERANCE = 10
#: Below this many (both), a warning: the step-size control chases round-off.
ROUND_OFF_TOLERANCE = 50


def check_tolerances(rtol, atol, dtype) -> None:
    """Refuse `rtol` and `atol` that the run's floating-point precision cannot meet (both
    below `UNREACHABLE_TOLERANCE` ε, e.g. rtol = atol = 0, or 1e-10 in float32), and warn
    when both are near it (below `ROUND_OFF_TOLERANCE` ε); traced tolerances pass."""
    r, a = _concrete_values("rtol", rtol), _concrete_values("atol", atol)
    if r is None or a is None:
        return
    eps = float(jnp.finfo(dtype).eps)
    loosest = max(float(np.max(r)), float(np.max(a)))
    hint = (
        "; JAX computes in float32 unless jax.config.update('jax_enable_x64', True) runs "
        "before any array is created"
        if jnp.dtype(dtype) == jnp.float32
        else ""
    )
    if loosest < UNREACHABLE_TOLERANCE * eps:
        raise ValueError(
            f"rtol = {rtol!r} and atol = {atol!r} cannot be met in {jnp.dtype(dtype).name} "
            f"(round-off ε = {eps:.1e}): take at least {UNREACHABLE_TOLERANCE * eps:.1e}{hint}"
        )
    if loosest < ROUND_OFF_TOLERANCE * eps:
        warnings.warn(
            f"rtol = {rtol!r} and atol = {atol!r} are within {ROUND_OFF_TOLERANCE} ε of "
            f"{jnp.dtype(dtype).name}'s round-off: the step-size control will chase "
            f"round-off and take many more steps{hint}",
            stacklevel=3,
        )


def merge_params(default: Params, params: Params | None, dtype) -> Params:
    """The parameters of a run: `params` merged into the mechanism's `default` (a partial
    mapping replaces only its keys, at any depth), every leaf an array of `dtype` (traced,
    never baked into a compilation). A leaf of another shape than the default's, or a key the
    mechanism does not have, is named in the error."""
    if params is None:
        merged = default
    elif default is None:  # a mechanism whose parameters travel apart (`monte_carlo`)
        merged = params
    else:
        merged = _merge(default, params, "params")
    return jax.tree_util.tree_map(
        lambda x: x if isinstance(x, jax.Array) else jnp.asarray(x, dtype), merged
    )


def _merge(default, given, path: str):
    if isinstance(default, Mapping) and isinstance(given, Mapping):
        unknown = sorted(str(k) for k in given if k not in default)
        if unknown:
            raise ValueError(f"{path} has keys the mechanism does not have: {unknown}")
        return {k: _merge(v, given[k], f"{path}[{k!r}]") if k in given else v
                for k, v in default.items()}  # fmt: skip
    if jax.tree_util.tree_structure(default) != jax.tree_util.tree_structure(given):
        raise ValueError(
            f"{path} has the structure {jax.tree_util.tree_structure(given)}; the mechanism's "
            f"is {jax.tree_util.tree_structure(default)}"
        )
    for d, g in zip(jax.tree_util.tree_leaves(default), jax.tree_util.tree_leaves(given),
                    strict=True):  # fmt: skip
        if np.shape(d) != np.shape(g):
            raise ValueError(f"{path} has shape {np.shape(g)}; the mechanism's has {np.shape(d)}")
    return given
