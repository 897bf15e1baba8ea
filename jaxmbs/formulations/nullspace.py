"""The orthogonal-complement method and its null-space bases (Pękal–Frączek 2016, §3.1–3.2).

The orthogonal-complement method writes the accelerations as (eq 3.5)

    q̈ = S Γ + P v̈,    C P = 0,

where the s = n − r columns of P span the null space of C and S Γ is a particular solution
of C q̈ = Γ (eq 3.8). `NullSpaceFormulation` then solves eq 3.7,
(PᵀMP) v̈ = Pᵀ(Q − M SΓ), once for all of them; each class here is one way to get P and SΓ:

- `QR` (`qr`): QR of Cᵀ (3.29–3.36); redundancy by column pivoting (3.31).
- `SVD` (`svd`): SVD of Cᵀ (3.24–3.28); pseudoinverse keeping the r largest singular values.
- `ZeroEigenvalue` (`eigen`): eigenvectors of CᵀC (3.9–3.19); pseudoinverse keeping the r
  largest eigenvalues.
- `PUTDHouseholder` (`putd-householder`): Householder triangularisation of Cᵀ (3.20–3.23)
  on the static independent rows.
- `PUTDGauss` (`putd-gauss`): Gauss elimination of Cᵀ with partial pivoting (3.20–3.23) on
  the static independent rows.

The Schur decomposition of the symmetric matrix CᵀC (3.16–3.19) coincides with its
eigendecomposition, so `ZeroEigenvalue` covers both. The rank r (hence s) always comes from
the static [`jaxmbs.Structure`][]; the "static independent rows" are its row selection, made
once outside jit by pivoting (the paper's Gauss–Jordan detection of redundant constraints).

None of these factors is differentiated: `NullSpaceFormulation` differentiates q̈ implicitly,
so non-unique bases (repeated singular values or eigenvalues, pivot choices) are harmless.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from .._internal.types import Array, ConstraintJacobian, ConstraintVector
from .base import AbstractFactorizedFormulation

if TYPE_CHECKING:
    from ..model import Mechanism


def _upper_transposed_solve(R: Array, b: Array) -> Array:
    """R⁻ᵀ b for an upper triangular R."""
    return jsl.solve_triangular(R, b, trans="T", lower=False)


class AbstractNullSpace(eqx.Module):
    """A way to compute P (C P = 0) and the particular accelerations S Γ.

    Subclasses define `name`, `complement` and `particular`. `complement` gets the full
    stacked Jacobian C (redundant rows included) and returns P with s = `mechanism.structure.dof`
    columns plus whatever factors `particular` needs; `particular` maps any right-hand side
    Γ (all rows) to a solution of C q̈ = Γ using those factors only, linearly.
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def complement(self, C: ConstraintJacobian, mechanism: Mechanism) -> tuple[Array, Any]:
        """P, shape (n, s), with C P = 0, and the factors of S."""

    @abc.abstractmethod
    def particular(self, factors: Any, gamma: ConstraintVector, mechanism: Mechanism) -> Array:
        """S Γ, shape (n,): a solution of C q̈ = Γ (eq 3.8)."""


class QR(AbstractNullSpace):
    """QR decomposition of Cᵀ (Pękal–Frączek 2016, eqs 3.29–3.36).

    Cᵀ E = [Q₁ Q₂] [R₁; 0] with Q₂ = P. The first r pivoted columns of Cᵀ are independent,
    R₁₁ = R₁[:, :r] is triangular, and S Γ = Q₁ R₁₁⁻ᵀ (EᵀΓ)[:r].

    **Arguments:**

    - `pivoting`: column pivoting E (eq 3.31) at every evaluation. `None` (default): pivot
      exactly when the mechanism has redundant constraints; otherwise E = I on the static
      independent rows (eq 3.29).
    """

    name: ClassVar[str] = "qr"
    pivoting: bool | None = eqx.field(default=None, static=True)

    def _pivots(self, mechanism: Mechanism) -> bool:
        structure = mechanism.structure
        return structure.redundancy > 0 if self.pivoting is None else self.pivoting

    def complement(self, C, mechanism):
        structure = mechanism.structure
        r = structure.rank
        if self._pivots(mechanism):
            Qf, Rf, perm = pivoted_qr(C.T, r)
            rows = perm[:r]
        else:
            Qf, Rf = jnp.linalg.qr(structure.independent_part(C).T, mode="complete")
            rows = None
        return Qf[:, r:], (Qf[:, :r], Rf[:r, :r], rows)

    def particular(self, factors, gamma, mechanism):
        structure = mechanism.structure
        Q1, R11, rows = factors
        g = structure.independent_part(gamma) if rows is None else gamma[rows]
        return Q1 @ _upper_transposed_solve(R11, g)


class SVD(AbstractNullSpace):
    """Singular value decomposition of Cᵀ (Pękal–Frączek 2016, eqs 3.24–3.28).

    Cᵀ = [W_d W_i] [Σ; 0] Vᵀ with P = W_i, and S Γ = C⁺Γ = W_d Σ_r⁻¹ V_rᵀ Γ: the pseudoinverse
    over all rows keeps the r = rank C largest singular values, so redundant constraints need
    no row selection.
    """

    name: ClassVar[str] = "svd"

    def complement(self, C, mechanism):
        structure = mechanism.structure
        r = structure.rank
        W, sigma, Vt = jnp.linalg.svd(C.T, full_matrices=True)
        return W[:, r:], (W[:, :r], sigma[:r], Vt[:r])

    def particular(self, factors, gamma, mechanism):
        W_d, sigma, Vt_r = factors
        return W_d @ ((Vt_r @ gamma) / sigma)


class ZeroEigenvalue(AbstractNullSpace):
    """Zero-eigenvalue (equivalently Schur) method (Pękal–Frączek 2016, eqs 3.9–3.19).

    CᵀC Ψ = Ψ Λ with ascending eigenvalues: the s eigenvectors of the zero eigenvalues are
    P = Ψ¹; with Ψ_r, Λ_r the other r, S Γ = (CᵀC)⁺CᵀΓ = Ψ_r Λ_r⁻¹ Ψ_rᵀ CᵀΓ (pseudoinverse
    over all rows). Forming CᵀC squares the condition number of C.
    """

    name: ClassVar[str] = "eigen"

    def complement(self, C, mechanism):
        structure = mechanism.structure
        s = structure.dof
        eigenvalues, Psi = jnp.linalg.eigh(C.T @ C)
        return Psi[:, :s], (Psi[:, s:], eigenvalues[s:], C)

    def particular(self, factors, gamma, mechanism):
        Psi_r, eigenvalues, C = factors
        return Psi_r @ ((Psi_r.T @ (C.T @ gamma)) / eigenvalues)


def householder_triangularize(
    A: Array, steps: int | None = None, pivoting: bool = False
) -> tuple[Array, Array, Array]:
    """Orthogonal H, upper trapezoidal Z and a column order `perm` with Hᵀ A[:, perm] = Z, by
    Householder reflections.

    H = H₁ H₂ ⋯ H_k, Hⱼ = I − βⱼ vⱼ vⱼᵀ, is accumulated explicitly (the transformation
    matrix H of Pękal–Frączek 2016, eq 3.20); one reflection per column for `steps` columns
    (default: all of A's). With `pivoting`, step j first brings forward the remaining column
    of largest norm in rows j and below (the column pivoting E of eq 3.31, LAPACK geqp3's
    choice), so that after r = rank A steps the rows of Z below r vanish to round-off; the
    interchange is written with one-hot masks, not a gather, so that it vectorises across a
    batch. Without pivoting `perm` is the identity.
    """
    n, k = A.shape
    row = jnp.arange(n)
    col = jnp.arange(k, dtype=jnp.int32)

    def interchange(j, Z, perm):
        norms = jnp.sum(jnp.where(row[:, None] >= j, Z * Z, 0.0), axis=0)
        p = jnp.argmax(jnp.where(col >= j, norms, -1.0)).astype(jnp.int32)
        at_j, at_p = col == j, col == p
        Z_j = jnp.sum(jnp.where(at_j, Z, 0.0), axis=1)
        Z_p = jnp.sum(jnp.where(at_p, Z, 0.0), axis=1)
        Z = Z + jnp.outer(Z_p - Z_j, at_j) + jnp.outer(Z_j - Z_p, at_p)
        perm_j, perm_p = jnp.sum(jnp.where(at_j, perm, 0)), jnp.sum(jnp.where(at_p, perm, 0))
        return Z, jnp.where(at_j, perm_p, jnp.where(at_p, perm_j, perm)).astype(perm.dtype)

    def reflect(j, carry):
        H, Z, perm = carry
        if pivoting:
            Z, perm = interchange(j, Z, perm)
        x = jnp.where(row >= j, Z[:, j], 0.0)
        alpha = -jnp.where(Z[j, j] >= 0, 1.0, -1.0) * jnp.linalg.norm(x)
        v = x.at[j].add(-alpha)
        vv = v @ v
        beta = jnp.where(vv > 0, 2.0 / jnp.where(vv > 0, vv, 1.0), 0.0)
        return H - beta * jnp.outer(H @ v, v), Z - beta * jnp.outer(v, v @ Z), perm

    steps = k if steps is None else steps
    return jax.lax.fori_loop(0, steps, reflect, (jnp.eye(n, dtype=A.dtype), A, col))


def pivoted_qr(A: Array, steps: int) -> tuple[Array, Array, Array]:
    """(Q, R, perm): the complete column-pivoted QR of A, A[:, perm] = Q R, with R's first
    `steps` rows exact. On CPU one LAPACK geqp3 (a loop over the matrices of a vmapped
    batch); elsewhere the Householder reflections of `householder_triangularize`,
    vectorised across a batch: jaxlib runs geqp3 on the host on a GPU, copying every batch
    there and back at every evaluation."""
    return jax.lax.platform_dependent(
        A,
        cpu=lambda A: jsl.qr(A, pivoting=True),
        default=lambda A: householder_triangularize(A, steps, pivoting=True),
    )


class PUTDHouseholder(AbstractNullSpace):
    """Pseudo-upper-triangular decomposition with Householder reflections, PUTD-H
    (Pękal–Frączek 2016, eqs 3.20–3.23).

    Hᵀ C_Iᵀ = Z = [Z₁; 0] on the static independent rows; P = H D₂ᵀ (the last s columns of
    H) and S Γ = H₁ Z₁⁻ᵀ Γ_I with H₁ the first r columns. The same factorisation as QR,
    written out with H formed explicitly, as the method prescribes.
    """

    name: ClassVar[str] = "putd-householder"

    def complement(self, C, mechanism):
        structure = mechanism.structure
        r = structure.rank
        H, Z, _ = householder_triangularize(structure.independent_part(C).T)
        return H[:, r:], (H[:, :r], Z[:r, :r])

    def particular(self, factors, gamma, mechanism):
        structure = mechanism.structure
        H1, Z1 = factors
        return H1 @ _upper_transposed_solve(Z1, structure.independent_part(gamma))


class PUTDGauss(AbstractNullSpace):
    """Pseudo-upper-triangular decomposition by Gauss elimination, PUTD-G
    (Pękal–Frączek 2016, eqs 3.20–3.23).

    Gauss elimination with partial pivoting of C_Iᵀ (static independent rows):
    Π C_Iᵀ = [L₁₁; L₂₁] U, so Hᵀ = L⁻¹Π with L = [L₁₁ 0; L₂₁ I] and Hᵀ C_Iᵀ = [U; 0]. Then

        P = H D₂ᵀ = Πᵀ [−L₁₁⁻ᵀ L₂₁ᵀ; I],    S Γ = Πᵀ [L₁₁⁻ᵀ U⁻ᵀ Γ_I; 0]:

    the pivots pick r dependent coordinates at every evaluation (P is not orthonormal).

    The n × r matrix C_Iᵀ is factorised as the square [C_Iᵀ 0]: partial pivoting chooses each
    column's pivot from that column alone, so the first r columns and their row interchanges
    are those of C_Iᵀ; the zero columns stay zero and are dropped (LAPACK divides by no zero
    pivot; a library that did would only reorder the last s rows, i.e. the columns of P,
    which leaves q̈ unchanged). On a GPU, jaxlib's LU of a vmapped batch is one batched
    cuBLAS call for square matrices and one cuSOLVER call per sample for rectangular ones (a
    McPherson batch of 10⁴ with the rectangular LU did not finish in 6 minutes).
    """

    name: ClassVar[str] = "putd-gauss"

    def complement(self, C, mechanism):
        structure = mechanism.structure
        r, s = structure.rank, structure.dof
        A = structure.independent_part(C).T
        lu, _, perm = jax.lax.linalg.lu(jnp.pad(A, ((0, 0), (0, s))))
        lu = lu[:, :r]
        L11 = jnp.tril(lu[:r], -1) + jnp.eye(r, dtype=lu.dtype)
        U = jnp.triu(lu[:r])
        coupling = jsl.solve_triangular(L11, lu[r:].T, trans="T", lower=True, unit_diagonal=True)
        P_pivoted = jnp.concatenate([-coupling, jnp.eye(s, dtype=lu.dtype)])
        P = jnp.zeros_like(P_pivoted).at[perm].set(P_pivoted)
        return P, (L11, U, perm)

    def particular(self, factors, gamma, mechanism):
        structure = mechanism.structure
        L11, U, perm = factors
        y = _upper_transposed_solve(U, structure.independent_part(gamma))
        u = jsl.solve_triangular(L11, y, trans="T", lower=True, unit_diagonal=True)
        return jnp.zeros(perm.shape, u.dtype).at[perm[: structure.rank]].set(u, unique_indices=True)


class NullSpaceFormulation(AbstractFactorizedFormulation):
    """Orthogonal-complement method (Pękal–Frączek 2016, eqs 3.5–3.8).

    With P (C P = 0) and S Γ from a null-space basis,

        (PᵀMP) v̈ = Pᵀ(Q − M SΓ),    q̈ = SΓ + P v̈    (eq 3.7, 3.5),

    by a Cholesky factorisation of PᵀMP. λ is eliminated; `multipliers` recovers the
    minimum-norm λ from the generalized reaction Q − M q̈.

    **Arguments:**

    - `nullspace`: a `AbstractNullSpace` (default `QR()`); the method's
      name is the basis's (`qr`, `svd`, `eigen`, `putd-householder`, `putd-gauss`).
    """

    nullspace: AbstractNullSpace = QR()

    @property
    def name(self) -> str:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.nullspace.name

    def factor(self, M, C, mechanism):
        structure = mechanism.structure
        if structure.rank == 0:
            return M, None, None, jsl.cho_factor(M, lower=True)
        P, basis = self.nullspace.complement(C, mechanism)
        reduced = jsl.cho_factor(P.T @ M @ P, lower=True) if structure.dof else None
        return M, P, basis, reduced

    def solve(self, factors, Q, gamma, mechanism):
        structure = mechanism.structure
        M, P, basis, reduced = factors
        if structure.rank == 0:  # no constraints: P = I
            return jsl.cho_solve(reduced, Q)
        qdd_p = self.nullspace.particular(basis, gamma, mechanism)
        if structure.dof == 0:
            return qdd_p
        return qdd_p + P @ jsl.cho_solve(reduced, P.T @ (Q - M @ qdd_p))
