"""Formulations: accelerations q̈ (and multipliers λ) from (M, Q, C, Γ).

Every formulation solves the same index-1 problem (Pękal–Frączek 2016, eq 2.5)

    M q̈ + Cᵀ λ = Q,    C q̈ = Γ,

and must return the same q̈ wherever it is valid. Redundant constraints are handled by the
static independent-row selection of [`jaxmbs.Structure`][]: the r independent rows of C
determine q̈ and the generalized reactions Cᵀλ uniquely; λ itself is then the
minimum-norm solution (unique only when there is no redundancy).

Adding a method means one small subclass of `AbstractFormulation` with a `name` and an
`accelerations` method (plus `multipliers` where the method yields them cheaply).
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from ._types import Array, ConstraintJacobian, ConstraintVector, GeneralizedForces, MassMatrix
from .structure import Structure


def independent(C: ConstraintJacobian, gamma: ConstraintVector, structure: Structure):
    """The independent rows C_I, Γ_I of the static row selection (no copy if all are)."""
    if structure.redundancy == 0:
        return C, gamma
    rows = jnp.asarray(structure.independent_rows, dtype=int)
    return C[rows], gamma[rows]


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


class AbstractFormulation(eqx.Module):
    """Interface of a formulation: `(M, Q, C, Γ, structure) -> q̈` (and λ)."""

    name: ClassVar[str]

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
        C_i, _ = independent(C, gamma, structure)
        lam_ind = jnp.linalg.solve(C_i @ C_i.T, C_i @ (Q - M @ qdd))
        return qdd, expand_multipliers(C, lam_ind, structure)


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


class QRNullSpace(AbstractFormulation):
    """QR null-space method (Pękal–Frączek 2016, eqs 3.29–3.36 with 3.5–3.8).

    Complete QR of the independent rows, C_Iᵀ = [Q₁ Q₂] [R₁; 0]. Then P = Q₂ spans the null
    space of C, the particular acceleration is S Γ = Q₁ R₁⁻ᵀ Γ_I (the minimum-norm solution
    of C q̈ = Γ), and the s = n − r independent accelerations follow from eq 3.7:

        (PᵀMP) v̈ = Pᵀ(Q − M SΓ),    q̈ = SΓ + P v̈.

    Multipliers: C_Iᵀ λ_I = Q₁R₁ λ_I = Q − M q̈, so λ_I = R₁⁻¹ Q₁ᵀ (Q − M q̈).
    """

    name: ClassVar[str] = "qr"

    def _solve(self, M, Q, C, gamma, structure):
        C_i, g_i = independent(C, gamma, structure)
        r = C_i.shape[0]
        Qf, Rf = jnp.linalg.qr(C_i.T, mode="complete")
        Q1, Q2, R1 = Qf[:, :r], Qf[:, r:], Rf[:r, :]
        qdd_p = Q1 @ jsl.solve_triangular(R1, g_i, trans="T", lower=False)
        if structure.dof == 0:
            return qdd_p, Q1, R1
        PtMP = Q2.T @ M @ Q2
        rhs = Q2.T @ (Q - M @ qdd_p)
        vdd = jsl.cho_solve(jsl.cho_factor(PtMP, lower=True), rhs)
        return qdd_p + Q2 @ vdd, Q1, R1

    def accelerations(self, M, Q, C, gamma, structure):
        return self._solve(M, Q, C, gamma, structure)[0]

    def multipliers(self, M, Q, C, gamma, structure):
        qdd, Q1, R1 = self._solve(M, Q, C, gamma, structure)
        lam_ind = jsl.solve_triangular(R1, Q1.T @ (Q - M @ qdd), lower=False)
        return qdd, expand_multipliers(C, lam_ind, structure)


#: Registry of formulations by name (`simulate(..., method=NAME)`).
FORMULATIONS: dict[str, type[AbstractFormulation]] = {cls.name: cls for cls in (KKT, QRNullSpace)}
METHODS: tuple[str, ...] = tuple(FORMULATIONS)


def get_formulation(method: str | AbstractFormulation) -> AbstractFormulation:
    """Look up a formulation by name, or pass an instance through."""
    if isinstance(method, AbstractFormulation):
        return method
    try:
        return FORMULATIONS[method]()
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}") from None
