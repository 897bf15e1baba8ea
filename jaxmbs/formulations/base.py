"""Formulations: accelerations q̈ (and multipliers λ) from (M, Q, C, Γ).

Every formulation solves the same index-1 problem (Pękal–Frączek 2016, eq 2.5)

    M q̈ + Cᵀ λ = Q,    C q̈ = Γ,

and must return the same q̈ wherever it is valid. The methods (`METHODS`, by name):

- `kkt`: the augmented system itself (eq 2.5);
- `qr`, `svd`, `eigen`, `putd-householder`, `putd-gauss`: the orthogonal-complement method
  (eqs 3.5–3.8) with a null-space basis from `jaxmbs.nullspace` ([`NullSpaceFormulation`][]);
- `partitioning`: coordinate partitioning (eqs 3.37–3.39, [`CoordinatePartitioning`][]);
- `wang-huston`: the weighted pseudoinverse (eqs 3.40–3.42, [`WangHuston`][]);
- `banded`: the same equations with sparse, block-banded algebra ([`BandedWangHuston`][]).

Redundant constraints: q̈ and the generalized reactions Cᵀλ are unique, λ is not; every
method returns the minimum-norm λ. Each method handles redundancy its own way (the static
independent-row selection of [`jaxmbs.Structure`][], pivoting, or a pseudoinverse whose
rank r is static).

Adding a method means one small subclass of `AbstractFormulation` with a `name` and an
`accelerations` method (plus `multipliers` where the method yields them cheaply); or of
`AbstractFactorizedFormulation` (a factorisation plus a linear solve), which adds exact
derivatives for free; or, for a new null-space basis, one `jaxmbs.nullspace.AbstractNullSpace`.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .._internal.types import (
    Array,
    ConstraintJacobian,
    ConstraintVector,
    GeneralizedForces,
    MassMatrix,
    Params,
)
from ..kinematics.compressed import CompressedJacobian
from ..kinematics.constraints import compressed_constraint_jacobian, constraint_jacobian
from ..kinematics.structure import Structure, independent_part, structure_band_plan
from . import banded
from . import nullspace as ns

if TYPE_CHECKING:
    from ..model import Mechanism


def independent(C: ConstraintJacobian, gamma: ConstraintVector, structure: Structure):
    """The independent rows C_I, Γ_I of the static row selection (no copy if all are)."""
    return independent_part(C, structure), independent_part(gamma, structure)


def expand_multipliers(C: ConstraintJacobian, lam_ind: Array, structure: Structure) -> Array:
    """Minimum-norm λ over all rows from the multipliers λ_I of the independent rows.

    Every row of C is a combination of the independent rows, C = T C_I with
    T = C C_Iᵀ (C_I C_Iᵀ)⁻¹. Any λ with Tᵀλ = λ_I gives the same generalized reaction
    Cᵀλ = C_Iᵀλ_I; the minimum-norm one is λ = T (TᵀT)⁻¹ λ_I.
    """
    if structure.redundancy == 0:
        return lam_ind
    C_i = C[jnp.asarray(structure.independent_rows, dtype=int)]
    T = jnp.linalg.solve(C_i @ C_i.T, C_i @ C.T).T
    return T @ jnp.linalg.solve(T.T @ T, lam_ind)


def reaction_multipliers(C: ConstraintJacobian, reaction: Array, structure: Structure) -> Array:
    """Minimum-norm λ with Cᵀλ = `reaction` (= Q − M q̈), through the independent rows."""
    if structure.rank == 0:
        return jnp.zeros(C.shape[0], reaction.dtype)
    C_i = independent_part(C, structure)
    lam_ind = jnp.linalg.solve(C_i @ C_i.T, C_i @ reaction)
    return expand_multipliers(C, lam_ind, structure)


class AbstractFormulation(eqx.Module):
    """Interface of a formulation: `(M, Q, C, Γ, structure) -> q̈` (and λ)."""

    name: ClassVar[str]

    def constraint_jacobian(
        self, mechanism: Mechanism, t, q: Array, params: Params
    ) -> ConstraintJacobian | CompressedJacobian:
        """C at (t, q) in the form `accelerations` reads: dense by default; a formulation
        that reads C's entries from its column probes returns a `CompressedJacobian`."""
        return constraint_jacobian(mechanism, t, q, params)

    def lapack_free(self, structure: Structure) -> bool:
        """Whether `accelerations` and `multipliers` call no LAPACK routine for this
        structure, so that a vmapped batch on CPU runs as vectorised kernels (default: no)."""
        return False

    @abc.abstractmethod
    def accelerations(
        self,
        M: MassMatrix,
        Q: GeneralizedForces,
        C: ConstraintJacobian,
        gamma: ConstraintVector,
        structure: Structure,
    ) -> Array:
        """Accelerations q̈, shape (n,)."""

    def multipliers(
        self,
        M: MassMatrix,
        Q: GeneralizedForces,
        C: ConstraintJacobian,
        gamma: ConstraintVector,
        structure: Structure,
    ) -> tuple[Array, Array]:
        """Accelerations q̈ and minimum-norm multipliers λ (shape (m + h,)).

        Default: λ from the generalized reaction, C_Iᵀ λ_I = Q − M q̈, by least squares.
        """
        qdd = self.accelerations(M, Q, C, gamma, structure)
        return qdd, reaction_multipliers(C, Q - M @ qdd, structure)

    def pivot_condition(
        self, C: ConstraintJacobian, structure: Structure
    ) -> tuple[Array, Array] | None:
        """Health of a pivot block that the method fixed once, outside jit.

        **Returns:** `None` (the default: no such block), or `(indicator, ill_conditioned)`:
        a signed reciprocal condition number of the block, in [−1, 1], whose sign changes when
        the block passes through singularity, and whether it is below the method's threshold.
        `simulate` stops with `RESULTS.singular_configuration` on either.
        """
        return None


class KKT(AbstractFormulation):
    """Index-1 augmented system (Pękal–Frączek 2016, eq 2.5) on the independent rows.

    [M  C_Iᵀ] [q̈ ]   [Q ]
    [C_I  0 ] [λ_I] = [Γ_I]
    """

    name: ClassVar[str] = "kkt"

    def _solve(self, M, Q, C, gamma, structure):
        C_i, g_i = independent(C, gamma, structure)
        r = C_i.shape[0]
        K = jnp.block([[M, C_i.T], [C_i, jnp.zeros((r, r), M.dtype)]])
        sol = jnp.linalg.solve(K, jnp.concatenate([Q, g_i]))
        return sol[: M.shape[0]], sol[M.shape[0] :]

    def accelerations(self, M, Q, C, gamma, structure):
        return self._solve(M, Q, C, gamma, structure)[0]

    def multipliers(self, M, Q, C, gamma, structure):
        qdd, lam_ind = self._solve(M, Q, C, gamma, structure)
        return qdd, expand_multipliers(C, lam_ind, structure)


class AbstractFactorizedFormulation(AbstractFormulation):
    """A formulation whose q̈ is linear in (Q, Γ): q̈ = `solve`(`factor`(M, C), Q, Γ).

    Its derivative is taken implicitly rather than through the factorisation: differentiating
    M q̈ + C_Iᵀλ_I = Q, C_I q̈ = Γ_I (the independent rows) shows that the tangent q̈' solves
    the same problem with

        Q' = dQ − dM q̈ − dC_Iᵀλ_I,    Γ'_I = dΓ_I − dC_I q̈,

    so it costs one more `solve` with the same factors (for a method reading all rows, Γ' is
    the consistent extension C C_I⁺ Γ'_I). Every method thus has the derivative of the same
    function, in any direction, and decompositions whose factors are not unique — repeated
    singular values or eigenvalues (several degrees of freedom, redundant constraints),
    pivot choices — give exact, finite derivatives in forward and reverse mode.
    """

    @abc.abstractmethod
    def factor(self, M: MassMatrix, C: ConstraintJacobian, structure: Structure) -> Any:
        """Everything that depends on M and C only."""

    @abc.abstractmethod
    def solve(
        self, factors: Any, Q: GeneralizedForces, gamma: ConstraintVector, structure: Structure
    ) -> Array:
        """q̈ for the right-hand sides (Q, Γ); linear in them."""

    def accelerations(self, M, Q, C, gamma, structure):
        @jax.custom_jvp
        def qdd_of(M, Q, C, gamma):
            return self.solve(self.factor(M, C, structure), Q, gamma, structure)

        @qdd_of.defjvp
        def qdd_jvp(primals, tangents):
            M, Q, C, gamma = primals
            dM, dQ, dC, dgamma = tangents
            factors = self.factor(M, C, structure)
            qdd = self.solve(factors, Q, gamma, structure)
            if structure.rank == 0:
                return qdd, self.solve(factors, dQ - dM @ qdd, dgamma, structure)
            C_i, dC_i = independent_part(C, structure), independent_part(dC, structure)
            gram = jsl.cho_factor(C_i @ C_i.T, lower=True)
            lam_i = jsl.cho_solve(gram, C_i @ (Q - M @ qdd))
            d_Q = dQ - dM @ qdd - dC_i.T @ lam_i
            d_gamma = independent_part(dgamma, structure) - dC_i @ qdd
            if structure.redundancy:
                d_gamma = C @ (C_i.T @ jsl.cho_solve(gram, d_gamma))
            return qdd, self.solve(factors, d_Q, d_gamma, structure)

        return qdd_of(M, Q, C, gamma)


class NullSpaceFormulation(AbstractFactorizedFormulation):
    """Orthogonal-complement method (Pękal–Frączek 2016, eqs 3.5–3.8).

    With P (C P = 0) and S Γ from a null-space basis,

        (PᵀMP) v̈ = Pᵀ(Q − M SΓ),    q̈ = SΓ + P v̈    (eq 3.7, 3.5),

    by a Cholesky factorisation of PᵀMP. λ is eliminated; `multipliers` recovers the
    minimum-norm λ from the generalized reaction Q − M q̈.

    **Arguments:**

    - `nullspace`: a `jaxmbs.nullspace.AbstractNullSpace` (default `QR()`); the method's
      name is the basis's (`qr`, `svd`, `eigen`, `putd-householder`, `putd-gauss`).
    """

    nullspace: ns.AbstractNullSpace = ns.QR()

    @property
    def name(self) -> str:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.nullspace.name

    def factor(self, M, C, structure):
        if structure.rank == 0:
            return M, None, None, jsl.cho_factor(M, lower=True)
        P, basis = self.nullspace.complement(C, structure)
        reduced = jsl.cho_factor(P.T @ M @ P, lower=True) if structure.dof else None
        return M, P, basis, reduced

    def solve(self, factors, Q, gamma, structure):
        M, P, basis, reduced = factors
        if structure.rank == 0:  # no constraints: P = I
            return jsl.cho_solve(reduced, Q)
        qdd_p = self.nullspace.particular(basis, gamma, structure)
        if structure.dof == 0:
            return qdd_p
        return qdd_p + P @ jsl.cho_solve(reduced, P.T @ (Q - M @ qdd_p))


class CoordinatePartitioning(AbstractFactorizedFormulation):
    """Coordinate partitioning (Pękal–Frączek 2016, eqs 3.37–3.39).

    Coordinates split into r dependent u and s independent v, C_I = [Φ_u Φ_v] on the static
    independent rows (redundant rows dropped). With B = Φ_u⁻¹Φ_v and a = Φ_u⁻¹Γ_I (one LU
    factorisation of Φ_u):

        M̌ = M^vv − M^vu B − Bᵀ(M^uv − M^uu B),    Q̌ = Q^v − M^vu a − Bᵀ(Q^u − M^uu a),
        v̈ = M̌⁻¹ Q̌,    ü = a − B v̈,    λ_I = Φ_u⁻ᵀ (Q^u − M^uv v̈ − M^uu ü)    (3.38–3.39).

    All coordinates are integrated. The partition is fixed outside jit — by default
    `Structure.dependent_coordinates`, chosen by column pivoting at the mechanism's
    reference configuration — and checked along the motion: `simulate` stops with
    `RESULTS.singular_configuration` when Φ_u (columns scaled to unit norm) has a reciprocal
    condition number below `min_condition` or passes through singularity.

    **Arguments:**

    - `dependent`: the r dependent coordinates (indices); `None`: the structure's choice.
    - `min_condition`: smallest accepted reciprocal condition number of Φ_u (default √ε of
      the dtype: at most half the digits are lost).
    """

    name: ClassVar[str] = "partitioning"
    dependent: tuple[int, ...] | None = eqx.field(default=None, static=True)
    min_condition: float | None = eqx.field(default=None, static=True)

    def partition(self, structure: Structure) -> tuple[np.ndarray, np.ndarray]:
        """Index arrays of the dependent (u) and independent (v) coordinates."""
        u = structure.dependent_coordinates if self.dependent is None else self.dependent
        u = tuple(sorted(int(i) for i in u))
        if (
            len(u) != structure.rank
            or len(set(u)) != len(u)
            or not set(u) <= set(range(structure.n))
        ):
            raise ValueError(
                f"coordinate partitioning needs {structure.rank} distinct dependent coordinates "
                f"out of {structure.n} (the rank of C), got {u}"
            )
        v = tuple(i for i in range(structure.n) if i not in set(u))
        return np.asarray(u, dtype=int), np.asarray(v, dtype=int)

    def factor(self, M, C, structure):
        u, v = self.partition(structure)
        C_i = independent_part(C, structure)
        lu = jsl.lu_factor(C_i[:, u])
        B = jsl.lu_solve(lu, C_i[:, v])
        M_uu, M_uv, M_vu = M[np.ix_(u, u)], M[np.ix_(u, v)], M[np.ix_(v, u)]
        M_reduced = M[np.ix_(v, v)] - M_vu @ B - B.T @ (M_uv - M_uu @ B)
        reduced = jsl.cho_factor(M_reduced, lower=True) if structure.dof else None
        return lu, B, M_uu, M_vu, reduced

    def solve(self, factors, Q, gamma, structure):
        u, v = self.partition(structure)
        lu, B, M_uu, M_vu, reduced = factors
        a = jsl.lu_solve(lu, independent_part(gamma, structure))
        qdd = jnp.zeros_like(Q)
        if structure.dof == 0:
            return qdd.at[u].set(a, unique_indices=True)
        vdd = jsl.cho_solve(reduced, Q[v] - M_vu @ a - B.T @ (Q[u] - M_uu @ a))
        return qdd.at[u].set(a - B @ vdd, unique_indices=True).at[v].set(vdd, unique_indices=True)

    def multipliers(self, M, Q, C, gamma, structure):
        u, _ = self.partition(structure)
        qdd = self.accelerations(M, Q, C, gamma, structure)
        C_i = independent_part(C, structure)
        lam_ind = jsl.lu_solve(jsl.lu_factor(C_i[:, u]), (Q - M @ qdd)[u], trans=1)
        return qdd, expand_multipliers(C, lam_ind, structure)

    def pivot_condition(self, C, structure):
        u, _ = self.partition(structure)
        C_i = independent_part(C, structure)
        block = C_i[:, u]
        block = block / jnp.linalg.norm(block, axis=0)
        sigma = jnp.linalg.svd(block, compute_uv=False)
        indicator = jnp.linalg.slogdet(block)[0] * sigma[-1] / sigma[0]
        threshold = self.min_condition
        if threshold is None:
            threshold = float(np.sqrt(np.finfo(block.dtype).eps))
        return indicator, jnp.abs(indicator) < threshold


class WangHuston(AbstractFactorizedFormulation):
    """Wang–Huston weighted pseudoinverse (Pękal–Frączek 2016, eqs 3.40–3.42).

        λ = (C M⁻¹ Cᵀ)⁻¹ (C M⁻¹ Q − Γ),    q̈ = M⁻¹ (Q − Cᵀλ),

    over all rows. With redundant constraints C M⁻¹ Cᵀ is singular and its pseudoinverse is
    used, from an eigendecomposition keeping the r = rank C largest eigenvalues; λ is then
    the minimum-norm one. Needs a nonsingular M.
    """

    name: ClassVar[str] = "wang-huston"

    def factor(self, M, C, structure):
        mass = jsl.cho_factor(M, lower=True)
        X = jsl.cho_solve(mass, C.T)
        G = C @ X
        if structure.redundancy == 0:
            return mass, C, X, jsl.cho_factor(G, lower=True)
        eigenvalues, V = jnp.linalg.eigh(G)
        p = structure.redundancy
        return mass, C, X, (V[:, p:], eigenvalues[p:])

    def _multipliers(self, factors, Q, gamma, structure):
        mass, C, X, G_factor = factors
        a = jsl.cho_solve(mass, Q)
        rhs = C @ a - gamma
        if structure.redundancy == 0:
            return a, jsl.cho_solve(G_factor, rhs)
        V_r, eigenvalues = G_factor
        return a, V_r @ ((V_r.T @ rhs) / eigenvalues)

    def solve(self, factors, Q, gamma, structure):
        a, lam = self._multipliers(factors, Q, gamma, structure)
        return a - factors[2] @ lam

    def multipliers(self, M, Q, C, gamma, structure):
        qdd = self.accelerations(M, Q, C, gamma, structure)
        _, lam = self._multipliers(self.factor(M, C, structure), Q, gamma, structure)
        return qdd, lam


class BandedWangHuston(AbstractFormulation):
    """Wang–Huston range-space form (Pękal–Frączek 2016, eqs 3.40–3.41) on the independent
    rows, with the structure's sparsity exploited (`jaxmbs.formulations.banded`):

        M = L Lᵀ (block-diagonal),  G = C_I L⁻ᵀ,  (G Gᵀ) λ_I = G L⁻¹Q − Γ_I,
        q̈ = L⁻ᵀ (L⁻¹Q − Gᵀ λ_I).

    G Gᵀ = C_I M⁻¹ C_Iᵀ is one dense block for small systems and block-tridiagonal (reverse
    Cuthill–McKee order, block cyclic reduction) for long chains: O(n) per evaluation. The
    derivative is implicit, like `AbstractFactorizedFormulation`'s: differentiating
    M q̈ + C_Iᵀλ_I = Q, C_I q̈ = Γ_I gives the same system for (q̈', λ_I') with right-hand
    sides (dQ − dM q̈ − dC_Iᵀλ_I, dΓ_I − dC_I q̈), one more solve with the same factors.
    Needs a positive definite, block-diagonal M (a dense M is one block) and a structure
    analysed with its sparsity (the default).
    """

    name: ClassVar[str] = "banded"

    def constraint_jacobian(self, mechanism, t, q, params):
        return compressed_constraint_jacobian(mechanism, t, q, params)

    def lapack_free(self, structure):
        # Redundant rows: their minimum-norm multipliers need a dense solve.
        return (
            structure.sparsity is not None
            and structure.redundancy == 0
            and structure_band_plan(structure).unrolled
        )

    def _solve(self, M, Q, C, gamma, structure):
        return banded.range_space_solve(structure_band_plan(structure), M, Q, C, gamma)

    def accelerations(self, M, Q, C, gamma, structure):
        return self._solve(M, Q, C, gamma, structure)[0]

    def multipliers(self, M, Q, C, gamma, structure):
        qdd, lam = self._solve(M, Q, C, gamma, structure)
        if structure.redundancy == 0:
            return qdd, lam
        if isinstance(C, CompressedJacobian):
            C = C.dense()
        return qdd, expand_multipliers(C, lam[jnp.asarray(structure.independent_rows)], structure)


#: The formulations by name (`simulate(..., method=NAME)`), in the order of Pękal–Frączek 2016.
FORMULATIONS: dict[str, AbstractFormulation] = {
    f.name: f
    for f in (
        KKT(),
        NullSpaceFormulation(ns.QR()),
        NullSpaceFormulation(ns.SVD()),
        NullSpaceFormulation(ns.ZeroEigenvalue()),
        NullSpaceFormulation(ns.PUTDHouseholder()),
        NullSpaceFormulation(ns.PUTDGauss()),
        CoordinatePartitioning(),
        WangHuston(),
        BandedWangHuston(),
    )
}
METHODS: tuple[str, ...] = tuple(FORMULATIONS)


def get_formulation(method: str | AbstractFormulation) -> AbstractFormulation:
    """Look up a formulation by name, or pass an instance through."""
    if isinstance(method, AbstractFormulation):
        return method
    try:
        return FORMULATIONS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}") from None
