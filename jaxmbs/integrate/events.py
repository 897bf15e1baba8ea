"""The rank condition of `simulate`'s terminating event: C changes rank along the motion.

The rank of C is analysed once, outside jit (`jaxmbs.kinematics.structure`); along the motion,
at the end of each step, the independent rows C_I must keep full rank. The test is the QR
factorisation C_Iᵀ = Q R (Pękal–Frączek 2016, eqs 21–27 use the same factorisation for the
solvability of the constraint groups): C_I has lost rank when

    min_k |R_kk| < rtol · max(max_k |R_kk|, 1),

and, with redundant constraints, when a row classed as dependent leaves the span of C_I. The
structure's algebra runs it (`AbstractAlgebra.rank_test`; a banded one with many independent
rows screens it first by the O(n) pivots of the Cholesky factorisation of C_I C_Iᵀ, see
`jaxmbs.kinematics.algebra`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Array, Params, PyTree
from ..kinematics import algebra
from ..kinematics.constraints import constraint_jacobian, stored_constraint_jacobian
from ..model import Mechanism


def rank_condition(
    mechanism: Mechanism,
    rtol: float,
    positions: Callable[[PyTree, Array, Params], Array],
) -> Callable[..., Array]:
    """The event condition `(t, y, args) -> bool`: the constraint Jacobian at the positions
    q = `positions(y, t, params)` of the integrated state y has changed rank (the test of the
    module notes). `args` = (params, valid); an invalid sample never triggers it."""
    test = mechanism.structure.algebra.rank_test(rtol)

    # Jitted: diffrax traces the event functions several times; each traces this once.
    @jax.jit
    def rank_lost(t, y, args):
        params, valid = jax.lax.stop_gradient(args)
        q = jax.lax.stop_gradient(positions(y, t, params))
        return test(stored_constraint_jacobian(mechanism, q, t, params)) & valid

    def rank_changed(t, y, args, **kwargs):
        return rank_lost(t, y, args)

    return rank_changed


def relative_pivot(mechanism: Mechanism, q: Array, t, params: Params):
    """min_k |R_kk| / max(max_k |R_kk|, 1) of the QR of C_Iᵀ at (t, q): how close the
    independent rows are to losing rank (1 for a mechanism without constraints)."""
    structure = mechanism.structure
    if structure.rank == 0:
        return jnp.ones((), q.dtype)
    C = constraint_jacobian(mechanism, q, t, params)
    return algebra.relative_pivot(C[np.asarray(structure.independent_rows)])


def mass_pivot(mechanism: Mechanism, q: Array, params: Params):
    """min_k L_kk / max_k L_kk of the Cholesky factor of M(q): how close the mass matrix is
    to singular (the lock of a body in Euler angles, where sin θ = 0; NaN where M is not
    positive definite), by the structure's algebra (`AbstractAlgebra.mass_pivots`: with the
    sparsity known, block by block, no LAPACK call under `vmap`)."""
    d = mechanism.structure.algebra.mass_pivots(algebra.mass_matrix(mechanism, q, params))
    return jnp.min(d) / jnp.max(d)
