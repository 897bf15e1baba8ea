"""Dense or banded: how M and C are stored, factorised and solved, chosen once per structure.

Every stage that evaluates M or C, factorises M, solves the range-space system on a set of
independent rows R (Pękal–Frączek 2016, eq 2.5 on C_R; the Wang–Huston form, eqs 3.40–3.41)

    M q̈ + C_Rᵀλ_R = Q,    C_R q̈ = Γ_R,

or tests the rank of C along the motion does it through the methods of the mechanism's
algebra (`Structure.algebra`; `algebra_of` also covers a mechanism whose structure is not
known; `mass_matrix` evaluates M through it). There are two:

- [`DenseAlgebra`][]: no sparsity pattern known. C by n Jacobian-vector products, M from the
  model, dense Cholesky factorisations (LAPACK), the rank by the QR of C_Iᵀ.
- [`BandedAlgebra`][]: the structure analysed with its sparsity (the default of
  `Mechanism(reference_q=…)`). C and M by their column colours (one product per colour), C
  stored as its probes where reading its entries from them pays
  (`jaxmbs.kinematics.compressed`), M factorised by its diagonal blocks and A = C_R M⁻¹C_Rᵀ as
  one block or block-tridiagonal (`jaxmbs.kinematics.banded`): O(n) for chains, no LAPACK
  call on small blocks, so that vmapped batches vectorise on CPU.

The rank test (`rank_test`) is the QR test of `jaxmbs.integrate.events`: C_I has lost rank
where min_k |R_kk| < rtol · max(max_k |R_kk|, 1) for C_Iᵀ = QR, and, with redundant rows, where
a dependent row leaves the span of C_I. A banded algebra with many independent rows
(r > `MAX_BLOCK`) and no redundancy screens it first by the pivots of the Cholesky
factorisation of C_I C_Iᵀ (`banded.gram_pivots`: equal to the |R_kk| with the rows in the
factorisation's elimination order, at O(n) cost); the screen clears only configurations far
from singular (all pivots above `GRAM_SCREEN`, or 10·rtol, times the scale), since squaring C
limits the pivots' accuracy to about ε‖C‖²/|R_kk|; anywhere else the QR decides.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import ClassVar

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .._internal import linalg
from .._internal.linalg import MAX_BLOCK
from .._internal.types import Array, Coordinates, Model, Params
from . import banded, banded_lu
from .compressed import CompressedJacobian, DenseJacobian, StoredJacobian
from .sparsity import Sparsity

#: Gram pivots above this fraction of their scale clear a configuration without the QR (their
#: error, about ε‖C‖²/pivot, is then below 1e-11 of the scale for a hundred rows).
GRAM_SCREEN = 1e-4
#: Up to this many unknowns (n + r), an implicit step's iteration matrix is assembled densely
#: (n + r jvps, one LAPACK LU) even where the sparsity is known: generalized-α runs of the
#: four-bar (17 unknowns) 9.5 against 26.5 ms banded, chain N = 5 (25) 3.5 against 10.1, N = 8
#: (40) 9.5 against 12.5; the two break even near 50 (chain N = 10), and the flyball governor
#: (52) runs 172 ms dense against 127 banded (benchmarks/README.md, round 23).
DENSE_NEWTON = 48

#: (Q, Γ) ↦ (q̈, λ) of the range-space system, λ zero on the rows outside R.
RangeSpaceSolver = Callable[[Array, Array], tuple[Array, Array]]

#: b ↦ S⁻¹b for a factorised Newton iteration matrix S.
LinearSolver = Callable[[Array], Array]


def _scale(d: Array) -> Array:
    """The scale that pivots d = |R_kk| are measured against: the largest, at least 1."""
    return jnp.maximum(jnp.max(d), 1.0)


def _qr_rank_lost(d: Array, rtol: float) -> Array:
    """The rank test on the pivots d = |R_kk| of the QR of C_Iᵀ."""
    return jnp.min(d) < rtol * _scale(d)


def relative_pivot(C_i: Array) -> Array:
    """min_k |R_kk| / max(max_k |R_kk|, 1) of the QR of C_Iᵀ: how close the rows C_I are to
    losing rank."""
    d = linalg.orthonormal_rows(C_i)[1]
    return jnp.min(d) / _scale(d)


class AbstractAlgebra(abc.ABC):
    """How M and C are evaluated, stored and solved for one structure, of which it keeps the
    row selection: the independent rows I and the dependent (redundant) ones, row numbers of
    the stacked C (empty for a mechanism whose structure is not known)."""

    #: The formulation `method="auto"` chooses for a structure with constraint rows.
    preferred_method: ClassVar[str]
    independent_rows: tuple[int, ...]
    dependent_rows: tuple[int, ...]

    @abc.abstractmethod
    def jacobian(self, residual: Callable[[Array], Array], qd: Array) -> Array:
        """The dense Jacobian C = ∂c/∂q̇ of the velocity residual `residual` (linear in q̇)."""

    @abc.abstractmethod
    def stored_jacobian(self, residual: Callable[[Array], Array], qd: Array) -> StoredJacobian:
        """C in the form this algebra reads its entries in."""

    @abc.abstractmethod
    def mass_matrix(self, mechanism: Model, q: Coordinates, params: Params) -> Array:
        """M(q), shape (n, n)."""

    @abc.abstractmethod
    def mass_pivots(self, M: Array) -> Array:
        """The diagonal of the Cholesky factor of M (not finite, or not positive, where M is
        not positive definite)."""

    @abc.abstractmethod
    def range_space_solver(
        self, M: Array, C: StoredJacobian, rows: tuple[int, ...]
    ) -> RangeSpaceSolver:
        """(Q, Γ) ↦ (q̈, λ) of M q̈ + C_Rᵀλ_R = Q, C_R q̈ = Γ_R on the independent rows
        R = `rows`, with M and C factorised once for any number of right-hand sides (λ zero
        on the rows outside R)."""

    @abc.abstractmethod
    def newton_system(
        self,
        residual: Callable[[Array], Array],
        x: Array,
        pattern: Callable[[], tuple[tuple[int, ...], ...]],
    ) -> tuple[Array, LinearSolver]:
        """r(x) and b ↦ S⁻¹b, S = ∂r/∂x the exact Newton iteration matrix of an implicit
        step's residual r on x = (q̈, λ_I) (λ on the independent rows, in their order; the
        rows of r ordered likewise, as `jaxmbs.integrate.generalized_alpha`'s eq 7), S
        factorised once for any number of right-hand sides. S is not symmetric. `pattern`
        gives, on demand, the columns of each row of S's pattern on all constraint rows
        (`jaxmbs.kinematics.structure.iteration_pattern`)."""

    def rank_test(self, rtol: float) -> Callable[[StoredJacobian], Array]:
        """C ↦ whether its independent rows have lost rank (module notes): by the QR of the
        independent rows (in order) and, with redundancy, the distance of the dependent rows
        from their span."""
        rows = np.asarray(self.independent_rows, dtype=int)
        dependent = np.asarray(self.dependent_rows, dtype=int)

        def rank_lost(C: StoredJacobian) -> Array:
            # Q1 spans the independent rows, d = |R_kk| of C_Iᵀ = Q1ᵀR (one LAPACK QR for a
            # single run; Gram–Schmidt for a small C_I under vmap, so that vmapped batches
            # call no batched library kernel).
            C = C.dense()
            Q1, d = linalg.orthonormal_rows(C[rows], passes=2 if dependent.size else 1)
            singular = _qr_rank_lost(d, rtol)
            if dependent.size:
                C_dep = C[dependent]
                leak = C_dep - (C_dep @ Q1.T) @ Q1
                singular = singular | (jnp.max(jnp.abs(leak)) > jnp.sqrt(rtol) * _scale(d))
            return singular

        return rank_lost

    def lapack_free(self, rows: tuple[int, ...]) -> bool:
        """Whether a vmapped range-space solve on `rows` calls no LAPACK routine (default:
        it calls them)."""
        return False


@dataclasses.dataclass(frozen=True)
class DenseAlgebra(AbstractAlgebra):
    """Dense M and C, LAPACK factorisations (no sparsity pattern known)."""

    preferred_method: ClassVar[str] = "qr"
    independent_rows: tuple[int, ...] = ()
    dependent_rows: tuple[int, ...] = ()

    def jacobian(self, residual, qd):
        return jax.jacfwd(residual)(qd)

    def stored_jacobian(self, residual, qd):
        return DenseJacobian(self.jacobian(residual, qd))

    def mass_matrix(self, mechanism, q, params):
        return mechanism.mass_matrix(q, params)

    def mass_pivots(self, M):
        return jnp.diagonal(linalg.cholesky(M))

    def range_space_solver(self, M, C, rows):
        """Eliminating q̈: λ_R = (C_R M⁻¹C_Rᵀ)⁻¹(C_R M⁻¹Q − Γ_R), q̈ = M⁻¹(Q − C_Rᵀλ_R)
        (eqs 3.40–3.41 on R), by two Cholesky factorisations, differentiated through."""
        index = jnp.asarray(rows, dtype=int)
        C_R = C.dense()[index]
        mass = jsl.cho_factor(M, lower=True)
        X = jsl.cho_solve(mass, C_R.T)  # M⁻¹C_Rᵀ
        schur = jsl.cho_factor(C_R @ X, lower=True)

        def solve(Q: Array, gamma: Array) -> tuple[Array, Array]:
            a = jsl.cho_solve(mass, Q)
            lam_R = jsl.cho_solve(schur, C_R @ a - gamma[index])
            lam = jnp.zeros(C.shape[0], lam_R.dtype).at[index].set(lam_R)
            return a - X @ lam_R, lam

        return solve

    def newton_system(self, residual, x, pattern):
        """S by one Jacobian-vector product per unknown, dense LU (LAPACK `getrf`):
        O((n + r)³) per factorisation."""
        r, linear = jax.linearize(residual, x)
        S = jax.vmap(linear, out_axes=1)(jnp.eye(x.shape[0], dtype=x.dtype))
        lu = jsl.lu_factor(S)
        return r, lambda b: jsl.lu_solve(lu, b)


@dataclasses.dataclass(frozen=True)
class BandedAlgebra(AbstractAlgebra):
    """M and C on the structure's sparsity pattern, block-banded factorisations
    (`jaxmbs.kinematics.banded`)."""

    sparsity: Sparsity
    independent_rows: tuple[int, ...]
    dependent_rows: tuple[int, ...]
    preferred_method: ClassVar[str] = "banded"

    def plan(self, rows: tuple[int, ...]) -> banded.BandPlan:
        """The band plan of A = C_R M⁻¹C_Rᵀ for the rows R (cached)."""
        return banded.band_plan(self.sparsity, tuple(rows))

    def jacobian(self, residual, qd):
        return self.sparsity.compressed_jacobian(residual, qd)

    def stored_jacobian(self, residual, qd):
        # The probes where the dense C costs a library product (large Jacobians); else the
        # dense C, assembled in one fused kernel and cheaper to read than a gather.
        if not self.sparsity.assembled_by_product:
            return DenseJacobian(self.jacobian(residual, qd))
        return CompressedJacobian(self.sparsity.probes(residual, qd), self.sparsity)

    def mass_matrix(self, mechanism, q, params):
        """M from `mechanism.mass_product` along the colour groups s_k of M's pattern,
        M[i, j] = (M s_colour(j))[i] on the pattern, when the mechanism has a product and the
        groups are fewer than n (Curtis–Powell–Reid grouping, as for C). For a mechanism built
        from its kinetic energy (`Mechanism.from_lagrangian`), M = ∂²T/∂q̇² and the dense
        Hessian is n Hessian-vector products; spatial bodies in Euler angles have a diagonal
        translational part and a 3×3 rotational block each, so 3 products give M for any
        number of bodies (McPherson strut, n = 30: 10× less work)."""
        product = mechanism.mass_product
        if product is None or self.sparsity.n_mass_colours >= mechanism.n:
            return mechanism.mass_matrix(q, params)
        probes = self.sparsity.mass_probes(lambda v: product(q, v, params), q.dtype)
        return self.sparsity.spread_mass(probes)

    def mass_pivots(self, M):
        """Block by block (`banded.mass_factor`: unrolled kernels, no LAPACK call under
        `vmap`), padding left out."""
        plan = self.plan(())
        real = np.flatnonzero(plan.mass_blocks.reshape(-1) < M.shape[0])
        L = banded.mass_factor(plan, M)
        return jnp.diagonal(L, axis1=-2, axis2=-1).reshape(-1)[real]

    def range_space_solver(self, M, C, rows):
        """`banded.range_space_solver`: implicit derivative, the factorisation never
        differentiated."""
        return banded.range_space_solver(self.plan(rows), M, C)

    def newton_system(self, residual, x, pattern):
        """`banded_lu.newton_system`: S from one product per colour of its `pattern`,
        banded LU with partial pivoting in reverse Cuthill–McKee order: O(n) per
        factorisation on chains; dense (`DenseAlgebra.newton_system`) up to `DENSE_NEWTON`
        unknowns, where the dense jvps and LU cost less."""
        if x.shape[0] <= DENSE_NEWTON:
            return DENSE.newton_system(residual, x, pattern)
        plan = banded_lu.lu_plan(self.sparsity.n, pattern(), self.independent_rows)
        return banded_lu.newton_system(plan, residual, x)

    def rank_test(self, rtol):
        if len(self.independent_rows) <= MAX_BLOCK or self.dependent_rows:
            return super().rank_test(rtol)
        plan = self.plan(self.independent_rows)
        order = banded.elimination_order(plan)
        k = len(self.independent_rows) + len(self.dependent_rows)
        real = np.flatnonzero(order < k)  # not padding
        rows = order[real]
        threshold = max(10.0 * rtol, GRAM_SCREEN)

        def rank_lost(C: StoredJacobian) -> Array:
            pivots = banded.gram_pivots(plan, C)[real]
            clear = jnp.min(pivots) > threshold * _scale(pivots)

            def qr_test() -> Array:
                return _qr_rank_lost(linalg.orthonormal_rows(C.dense()[rows])[1], rtol)

            return jax.lax.cond(clear, lambda: jnp.zeros((), bool), qr_test)

        return rank_lost

    def lapack_free(self, rows):
        return self.plan(rows).unrolled


#: The algebra of a mechanism whose structure is not known.
DENSE = DenseAlgebra()


def algebra_of(mechanism: Model) -> AbstractAlgebra:
    """The mechanism's algebra (`Structure.algebra`), dense where no structure is known."""
    return DENSE if mechanism.structure is None else mechanism.structure.algebra


def mass_matrix(mechanism: Model, q: Coordinates, params: Params) -> Array:
    """M(q) (Pękal–Frączek 2016, eq 2.1), shape (n, n), as the engine evaluates it: by the
    mechanism's algebra (`AbstractAlgebra.mass_matrix`), on M's sparsity pattern where that
    pays."""
    return algebra_of(mechanism).mass_matrix(mechanism, q, params)
