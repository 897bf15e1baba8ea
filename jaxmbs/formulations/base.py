"""Formulations: accelerations q̈ (and multipliers λ) from (M, Q, C, Γ).

Every formulation solves the same index-1 problem (Pękal–Frączek 2016, eq 2.5)

    M q̈ + Cᵀ λ = Q,    C q̈ = Γ,

and must return the same q̈ wherever it is valid. The methods (`METHODS`, by name):

- `kkt`: the augmented system itself (eq 2.5);
- `qr`, `svd`, `eigen`, `putd-householder`, `putd-gauss`: the orthogonal-complement method
  (eqs 3.5–3.8) with a null-space basis from `jaxmbs.formulations.nullspace`
  ([`NullSpaceFormulation`][]);
- `partitioning`: coordinate partitioning (eqs 3.37–3.39, [`CoordinatePartitioning`][]);
- `wang-huston`: the weighted pseudoinverse (eqs 3.40–3.42, [`WangHuston`][]);
- `banded`: the same equations on the independent rows through the structure's algebra,
  sparse and block-banded where the sparsity is known ([`BandedWangHuston`][]).

Redundant constraints: q̈ and the generalized reactions Cᵀλ are unique, λ is not; every
method returns the minimum-norm λ. Each method handles redundancy its own way (the static
independent-row selection of [`jaxmbs.Structure`][], pivoting, or a pseudoinverse whose
rank r is static).

Adding a method means one small subclass of `AbstractFormulation` with a `name` and an
`accelerations` method (plus `multipliers` where the method yields them cheaply); or of
`AbstractFactorizedFormulation` (a factorisation plus a linear solve), which adds exact
derivatives for free; or, for a new null-space basis, one
`jaxmbs.formulations.nullspace.AbstractNullSpace`. Register it in `registry.FORMULATIONS` to
make it available by name.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

import equinox as eqx
import jax
import jax.scipy.linalg as jsl

from .._internal.types import (
    Array,
    ConstraintJacobian,
    ConstraintVector,
    GeneralizedForces,
    MassMatrix,
    Params,
)
from ..kinematics.compressed import StoredJacobian
from ..kinematics.constraints import constraint_jacobian

if TYPE_CHECKING:
    from ..model import Mechanism


class AbstractFormulation(eqx.Module):
    """Interface of a formulation: `(M, Q, C, Γ, mechanism) -> q̈` (and λ); the static
    choices (independent rows, rank, algebra) are read from `mechanism.structure`."""

    name: ClassVar[str]

    def constraint_jacobian(
        self, mechanism: Mechanism, q: Array, t, params: Params
    ) -> ConstraintJacobian | StoredJacobian:
        """C at (t, q) in the form `accelerations` reads: dense by default; a formulation
        that works through the structure's algebra returns its `StoredJacobian`."""
        return constraint_jacobian(mechanism, q, t, params)

    def lapack_free(self, mechanism: Mechanism) -> bool:
        """Whether `accelerations` and `multipliers` call no LAPACK routine for this
        mechanism's structure, so that a vmapped batch on CPU runs as vectorised kernels
        (default: no)."""
        return False

    @abc.abstractmethod
    def accelerations(
        self,
        M: MassMatrix,
        Q: GeneralizedForces,
        C: ConstraintJacobian,
        gamma: ConstraintVector,
        mechanism: Mechanism,
    ) -> Array:
        """Accelerations q̈, shape (n,), for the mechanism's structure (its independent rows,
        rank, algebra)."""

    def multipliers(
        self,
        M: MassMatrix,
        Q: GeneralizedForces,
        C: ConstraintJacobian,
        gamma: ConstraintVector,
        mechanism: Mechanism,
    ) -> tuple[Array, Array]:
        """Accelerations q̈ and minimum-norm multipliers λ (shape (m + h,)).

        Default: λ from the generalized reaction, C_Iᵀ λ_I = Q − M q̈, by least squares.
        """
        qdd = self.accelerations(M, Q, C, gamma, mechanism)
        return qdd, mechanism.structure.reaction_multipliers(C, Q - M @ qdd)

    def pivot_condition(
        self, C: ConstraintJacobian, mechanism: Mechanism
    ) -> tuple[Array, Array] | None:
        """Health of a pivot block that the method fixed once, outside jit.

        **Returns:** `None` (the default: no such block), or `(indicator, ill_conditioned)`:
        a signed reciprocal condition number of the block, in [−1, 1], whose sign changes when
        the block passes through singularity, and whether it is below the method's threshold.
        `simulate` stops with `RESULTS.singular_configuration` on either.
        """
        return None


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
    def factor(self, M: MassMatrix, C: ConstraintJacobian, mechanism: Mechanism) -> Any:
        """Everything that depends on M and C only."""

    @abc.abstractmethod
    def solve(
        self, factors: Any, Q: GeneralizedForces, gamma: ConstraintVector, mechanism: Mechanism
    ) -> Array:
        """q̈ for the right-hand sides (Q, Γ); linear in them."""

    def accelerations(self, M, Q, C, gamma, mechanism):
        structure = mechanism.structure

        @jax.custom_jvp
        def qdd_of(M, Q, C, gamma):
            return self.solve(self.factor(M, C, mechanism), Q, gamma, mechanism)

        @qdd_of.defjvp
        def qdd_jvp(primals, tangents):
            M, Q, C, gamma = primals
            dM, dQ, dC, dgamma = tangents
            factors = self.factor(M, C, mechanism)
            qdd = self.solve(factors, Q, gamma, mechanism)
            if structure.rank == 0:
                return qdd, self.solve(factors, dQ - dM @ qdd, dgamma, mechanism)
            C_i, dC_i = structure.independent_part(C), structure.independent_part(dC)
            gram = jsl.cho_factor(C_i @ C_i.T, lower=True)
            lam_i = jsl.cho_solve(gram, C_i @ (Q - M @ qdd))
            d_Q = dQ - dM @ qdd - dC_i.T @ lam_i
            d_gamma = structure.independent_part(dgamma) - dC_i @ qdd
            if structure.redundancy:
                d_gamma = C @ (C_i.T @ jsl.cho_solve(gram, d_gamma))
            return qdd, self.solve(factors, d_Q, d_gamma, mechanism)

        return qdd_of(M, Q, C, gamma)
