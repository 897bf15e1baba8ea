"""Checks of `simulate`'s arguments and of the initial state, shared by the integrators."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from .._internal import linalg
from .._internal.checks import is_concrete
from ..formulations import banded
from ..kinematics.constraints import position_residual, velocity_residual
from ..kinematics.structure import structure_band_plan
from ..model import inertia

if TYPE_CHECKING:
    from ..model import Mechanism


def check_inputs(mechanism: Mechanism, q0, qd0, t_span, saveat):
    """q0, q̇0, t0, t1 and the output times as arrays of one float dtype, with their shapes
    and order checked (before anything is traced)."""
    n = mechanism.n
    q0 = jnp.asarray(q0)
    qd0 = jnp.asarray(qd0)
    dtype = jnp.result_type(q0.dtype, qd0.dtype, float)
    q0, qd0 = q0.astype(dtype), qd0.astype(dtype)
    if q0.shape != (n,):
        raise ValueError(f"q0 must have shape ({n},) for this mechanism, got {q0.shape}")
    if qd0.shape != (n,):
        raise ValueError(f"qd0 must have shape ({n},) for this mechanism, got {qd0.shape}")
    if len(t_span) != 2:
        raise ValueError(f"t_span must be (t0, t1), got {t_span!r}")
    t0, t1 = (jnp.asarray(t, dtype) for t in t_span)
    if saveat is not None:
        saveat = jnp.asarray(saveat, dtype)
        if saveat.ndim != 1 or saveat.shape[0] == 0:
            raise ValueError(f"saveat must be a non-empty 1-D array of times, got {saveat.shape}")
        if not isinstance(saveat, jax.core.Tracer):
            s = np.asarray(saveat)
            if np.any(np.diff(s) < 0):
                raise ValueError("saveat must be non-decreasing")
            if is_concrete(t0, t1) and (s[0] < float(t0) or s[-1] > float(t1)):
                raise ValueError(f"saveat must lie within t_span = ({float(t0)}, {float(t1)})")
    return q0, qd0, t0, t1, saveat


def initial_checks(mechanism: Mechanism, t0, q0, qd0, params, tol: float) -> dict:
    """Checks of the initial state: finite, positive definite M, and consistent."""
    phi = position_residual(mechanism, t0, q0, params)
    c = velocity_residual(mechanism, t0, q0, qd0, params)
    M = inertia.mass_matrix(mechanism, q0, params)
    structure = mechanism.structure
    if structure is not None and structure.sparsity is not None:  # block by block, no LAPACK
        chol = banded.mass_factor(structure_band_plan(structure), M)
    else:
        chol = linalg.cholesky(M)
    err_phi = jnp.max(jnp.abs(phi), initial=0.0)
    err_c = jnp.max(jnp.abs(c), initial=0.0)
    finite = jnp.all(jnp.isfinite(q0)) & jnp.all(jnp.isfinite(qd0))
    # A non-finite parameter (e.g. a NaN force amplitude in a Monte Carlo batch) would only
    # show up as a failed step after max_steps; flag it at the start instead.
    for leaf in jax.tree_util.tree_leaves(params):
        finite = finite & jnp.all(jnp.isfinite(leaf))
    mass_ok = jnp.all(jnp.isfinite(chol)) & jnp.all(jnp.diagonal(chol, axis1=-2, axis2=-1) > 0)
    consistent = (err_phi <= tol) & (err_c <= tol)
    return {
        "finite": finite,
        "mass_ok": mass_ok,
        "consistent": consistent,
        "ok": finite & mass_ok & consistent,
        "err_phi": err_phi,
        "err_c": err_c,
    }


def raise_if_invalid(check: dict, tol: float) -> None:
    """Eager, informative errors for a concrete initial state."""
    if not bool(check["finite"]):
        raise ValueError("q0, qd0 or a parameter is not finite (NaN or inf)")
    if not bool(check["mass_ok"]):
        raise ValueError("the mass matrix M(q0) is singular or not positive definite")
    if not bool(check["consistent"]):
        raise ValueError(
            f"inconsistent initial conditions: |Φ(q0)| = {float(check['err_phi']):.3e}, "
            f"|c(q0, q̇0)| = {float(check['err_c']):.3e} exceed consistency_tol = {tol:g}; "
            "use jaxmbs.assemble(mechanism, q_guess, qd_guess)"
        )
