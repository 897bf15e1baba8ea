"""The rank condition of `simulate`'s terminating event: C changes rank along the motion.

The rank of C is analysed once, outside jit (`jaxmbs.kinematics.structure`); along the motion,
at the end of each step, the independent rows C_I must keep full rank. The test is the QR
factorisation C_Iᵀ = Q R (Pękal–Frączek 2016, eqs 21–27 use the same factorisation for the
solvability of the constraint groups): C_I has lost rank when

    min_k |R_kk| < rtol · max(max_k |R_kk|, 1),

and, with redundant constraints, when a row classed as dependent leaves the span of C_I.

For many independent rows (r > `MAX_BLOCK`) the QR is a LAPACK call on the dense C at every
step (chain N = 50: 100 × 150, about as much as the rest of the step). When C is sparse and
there is no redundancy, the step is first screened by the pivots of the Cholesky factorisation
of C_I C_Iᵀ, which equal the |R_kk| of the QR with the rows in the same order and cost O(n) on
a banded C (`jaxmbs.formulations.banded.gram_pivots`). Squaring C limits their accuracy to
about ε‖C‖²/|R_kk|, so they only clear configurations far from singular (all pivots above
`GRAM_SCREEN`, or 10·rtol, times the scale); anywhere else the QR decides, so the test is the
QR test above, with the rows in the factorisation's elimination order.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._internal import linalg
from .._internal.linalg import MAX_BLOCK
from .._internal.types import Array, Params, PyTree
from ..formulations import banded
from ..kinematics import inertia
from ..kinematics.compressed import CompressedJacobian
from ..kinematics.constraints import compressed_constraint_jacobian, constraint_jacobian
from ..kinematics.structure import Structure, structure_band_plan
from ..model import Mechanism

#: Gram pivots above this fraction of their scale clear a configuration without the QR (their
#: error, about ε‖C‖²/pivot, is then below 1e-11 of the scale for a hundred rows).
GRAM_SCREEN = 1e-4


def _scale(d: Array) -> Array:
    """The scale that pivots d = |R_kk| are measured against: the largest, at least 1."""
    return jnp.maximum(jnp.max(d), 1.0)


def _qr_rank_lost(d: Array, rtol: float) -> Array:
    """The rank test on the pivots d = |R_kk| of the QR of C_Iᵀ."""
    return jnp.min(d) < rtol * _scale(d)


def screened_by_gram(structure: Structure) -> bool:
    """Whether the rank test screens by Gram pivots (`gram_rank_test`): many independent
    rows, a sparsity pattern, no redundancy."""
    return (
        structure.rank > MAX_BLOCK and structure.redundancy == 0 and structure.sparsity is not None
    )


def qr_rank_test(structure: Structure, rtol: float):
    """C ↦ whether C has lost rank, by the QR of its independent rows (in order) and, with
    redundancy, the distance of the dependent rows from their span."""
    rows = np.asarray(structure.independent_rows)
    dependent = np.asarray(structure.dependent_rows, dtype=int)

    def rank_lost(C: Array) -> Array:
        # Q1 spans the independent rows, d = |R_kk| of C_Iᵀ = Q1ᵀR (one LAPACK QR for a
        # single run; Gram–Schmidt for a small C_I under vmap, so that vmapped batches call
        # no batched library kernel).
        Q1, d = linalg.orthonormal_rows(C[rows], passes=2 if structure.redundancy else 1)
        singular = _qr_rank_lost(d, rtol)
        if structure.redundancy:
            C_dep = C[dependent]
            leak = C_dep - (C_dep @ Q1.T) @ Q1
            singular = singular | (jnp.max(jnp.abs(leak)) > jnp.sqrt(rtol) * _scale(d))
        return singular

    return rank_lost


def gram_rank_test(structure: Structure, rtol: float):
    """C (dense or compressed) ↦ whether C has lost rank: the QR test on the independent rows
    in the band plan's elimination order, skipped where the Gram pivots clear the
    configuration (see the module notes). Needs `screened_by_gram(structure)`."""
    plan = structure_band_plan(structure)
    order = banded.elimination_order(plan)
    real = np.flatnonzero(order < structure.n_constraints)  # not padding
    rows = order[real]
    threshold = max(10.0 * rtol, GRAM_SCREEN)

    def rank_lost(C: Array | CompressedJacobian) -> Array:
        pivots = banded.gram_pivots(plan, C)[real]
        clear = jnp.min(pivots) > threshold * _scale(pivots)

        def qr_test() -> Array:
            dense = C.dense() if isinstance(C, CompressedJacobian) else C
            return _qr_rank_lost(linalg.orthonormal_rows(dense[rows])[1], rtol)

        return jax.lax.cond(clear, lambda: jnp.zeros((), bool), qr_test)

    return rank_lost


def rank_condition(
    mechanism: Mechanism,
    rtol: float,
    positions: Callable[[Array, PyTree, Params], Array],
) -> Callable[..., Array]:
    """The event condition `(t, y, args) -> bool`: the constraint Jacobian at the positions
    q = `positions(t, y, params)` of the integrated state y has changed rank (the test of the
    module notes). `args` = (params, valid); an invalid sample never triggers it."""
    structure = mechanism.structure
    if screened_by_gram(structure):
        test = gram_rank_test(structure, rtol)

        def jacobian(t, q, params):
            return compressed_constraint_jacobian(mechanism, q, t, params, structure.sparsity)

    else:
        test = qr_rank_test(structure, rtol)

        def jacobian(t, q, params):
            return constraint_jacobian(mechanism, q, t, params)

    # Jitted: diffrax traces the event functions several times; each traces this once.
    @jax.jit
    def rank_lost(t, y, args):
        params, valid = jax.lax.stop_gradient(args)
        q = jax.lax.stop_gradient(positions(t, y, params))
        return test(jacobian(t, q, params)) & valid

    def rank_changed(t, y, args, **kwargs):
        return rank_lost(t, y, args)

    return rank_changed


def relative_pivot(mechanism: Mechanism, t, q: Array, params: Params):
    """min_k |R_kk| / max(max_k |R_kk|, 1) of the QR of C_Iᵀ at (t, q): how close the
    independent rows are to losing rank (1 for a mechanism without constraints)."""
    structure = mechanism.structure
    if structure.rank == 0:
        return jnp.ones((), q.dtype)
    C = constraint_jacobian(mechanism, q, t, params)[np.asarray(structure.independent_rows)]
    d = linalg.orthonormal_rows(C)[1]
    return jnp.min(d) / _scale(d)


def mass_pivot(mechanism: Mechanism, q: Array, params: Params):
    """min_k L_kk / max_k L_kk of the Cholesky factor of M(q): how close the mass matrix is
    to singular (the lock of a body in Euler angles, where sin θ = 0; NaN where M is not
    positive definite). With the sparsity known, M is factorised by its diagonal blocks
    (`banded.mass_factor`: unrolled kernels, no LAPACK call under `vmap`)."""
    structure = mechanism.structure
    M = inertia.mass_matrix(mechanism, q, params)
    if structure.sparsity is None or structure.rank == 0:  # no band plan without rows
        d = jnp.diagonal(linalg.cholesky(M))
    else:
        plan = structure_band_plan(structure)
        L = banded.mass_factor(plan, M)
        real = np.flatnonzero(plan.mass_blocks.reshape(-1) < M.shape[0])  # not padding
        d = jnp.diagonal(L, axis1=-2, axis2=-1).reshape(-1)[real]
    return jnp.min(d) / jnp.max(d)
