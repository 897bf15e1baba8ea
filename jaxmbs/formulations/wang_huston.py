"""The Wang–Huston range-space form (Pękal–Frączek 2016, eqs 3.40–3.42): dense with a
pseudoinverse (`WangHuston`), and on the structure's sparsity (`BandedWangHuston`)."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
import jax.scipy.linalg as jsl

from ..kinematics.compressed import stored
from ..kinematics.constraints import stored_constraint_jacobian
from .base import AbstractFactorizedFormulation, AbstractFormulation


class WangHuston(AbstractFactorizedFormulation):
    """Wang–Huston weighted pseudoinverse (Pękal–Frączek 2016, eqs 3.40–3.42).

        λ = (C M⁻¹ Cᵀ)⁻¹ (C M⁻¹ Q − Γ),    q̈ = M⁻¹ (Q − Cᵀλ),

    over all rows. With redundant constraints C M⁻¹ Cᵀ is singular and its pseudoinverse is
    used, from an eigendecomposition keeping the r = rank C largest eigenvalues; λ is then
    the minimum-norm one. Needs a nonsingular M.
    """

    name: ClassVar[str] = "wang-huston"

    def factor(self, M, C, mechanism):
        structure = mechanism.structure
        mass = jsl.cho_factor(M, lower=True)
        X = jsl.cho_solve(mass, C.T)
        G = C @ X
        if structure.redundancy == 0:
            return mass, C, X, jsl.cho_factor(G, lower=True)
        eigenvalues, V = jnp.linalg.eigh(G)
        p = structure.redundancy
        return mass, C, X, (V[:, p:], eigenvalues[p:])

    def _multipliers(self, factors, Q, gamma, mechanism):
        structure = mechanism.structure
        mass, C, X, G_factor = factors
        a = jsl.cho_solve(mass, Q)
        rhs = C @ a - gamma
        if structure.redundancy == 0:
            return a, jsl.cho_solve(G_factor, rhs)
        V_r, eigenvalues = G_factor
        return a, V_r @ ((V_r.T @ rhs) / eigenvalues)

    def solve(self, factors, Q, gamma, mechanism):
        a, lam = self._multipliers(factors, Q, gamma, mechanism)
        return a - factors[2] @ lam

    def multipliers(self, M, Q, C, gamma, mechanism):
        qdd = self.accelerations(M, Q, C, gamma, mechanism)
        _, lam = self._multipliers(self.factor(M, C, mechanism), Q, gamma, mechanism)
        return qdd, lam


class BandedWangHuston(AbstractFormulation):
    """Wang–Huston range-space form (Pękal–Frączek 2016, eqs 3.40–3.41) on the independent
    rows, with the structure's sparsity exploited (`jaxmbs.kinematics.banded`):

        M = L Lᵀ (block-diagonal),  G = C_I L⁻ᵀ,  (G Gᵀ) λ_I = G L⁻¹Q − Γ_I,
        q̈ = L⁻ᵀ (L⁻¹Q − Gᵀ λ_I).

    G Gᵀ = C_I M⁻¹ C_Iᵀ is one dense block for small systems and block-tridiagonal (reverse
    Cuthill–McKee order, block cyclic reduction) for long chains: O(n) per evaluation. The
    derivative is implicit, like `AbstractFactorizedFormulation`'s: differentiating
    M q̈ + C_Iᵀλ_I = Q, C_I q̈ = Γ_I gives the same system for (q̈', λ_I') with right-hand
    sides (dQ − dM q̈ − dC_Iᵀλ_I, dΓ_I − dC_I q̈), one more solve with the same factors.
    Needs a positive definite M. Through the structure's algebra
    (`jaxmbs.kinematics.algebra`): banded with the sparsity known (the default), dense
    Cholesky factorisations otherwise.
    """

    name: ClassVar[str] = "banded"

    def constraint_jacobian(self, mechanism, q, t, params):
        return stored_constraint_jacobian(mechanism, q, t, params)

    def lapack_free(self, mechanism):
        structure = mechanism.structure
        # Redundant rows: their minimum-norm multipliers need a dense solve.
        return structure.redundancy == 0 and structure.algebra.lapack_free(
            structure.independent_rows
        )

    def _solve(self, M, Q, C, gamma, mechanism):
        structure = mechanism.structure
        solver = structure.algebra.range_space_solver(M, stored(C), structure.independent_rows)
        return solver(Q, gamma)

    def accelerations(self, M, Q, C, gamma, mechanism):
        return self._solve(M, Q, C, gamma, mechanism)[0]

    def multipliers(self, M, Q, C, gamma, mechanism):
        structure = mechanism.structure
        qdd, lam = self._solve(M, Q, C, gamma, mechanism)
        if structure.redundancy == 0:
            return qdd, lam
        lam_i = lam[jnp.asarray(structure.independent_rows)]
        return qdd, structure.expand_multipliers(stored(C).dense(), lam_i)
