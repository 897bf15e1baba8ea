"""The projective criterion for choosing independent coordinates (Blajer, Schiehlen, Schirm 1994).

**Projective criterion (§3).** The unit vector kᵢ along q̇ᵢ splits into its projections onto
the tangent subspace (spanned by any null-space basis P of the constraint Jacobian, C P = 0)
and onto the constrained subspace, measured in the metric M of the configuration space:

    cos²αᵢ = |kᵢ⁽ᵈ⁾|² / |kᵢ|² = [P (PᵀMP)⁻¹ Pᵀ]ᵢᵢ / (M⁻¹)ᵢᵢ               (eq 23a)
    cos²βᵢ = |kᵢ⁽ᶜ⁾|² / |kᵢ|² = [M⁻¹Cᵀ (CM⁻¹Cᵀ)⁻¹ CM⁻¹]ᵢᵢ / (M⁻¹)ᵢᵢ       (eq 23b)

P(PᵀMP)⁻¹Pᵀ does not depend on the basis, so the criterion of every coordinate comes at once
from one QR null-space basis, with no partition tried first; the two projectors add up to M⁻¹,
so cos²αᵢ + cos²βᵢ = 1. The larger cos²αᵢ, the better qᵢ serves as an independent coordinate;
cos²αᵢ = 0 is a singular choice. The SVD criterion is the same construction with M replaced by
the identity: geometry only, blind to the masses.

**Choice of the k = n − r independent coordinates.** With Z = P L⁻ᵀ (LLᵀ = PᵀMP, so ZᵀMZ = I)
and wᵢ = Zᵢ / √(M⁻¹)ᵢᵢ the i-th row scaled, |wᵢ|² = cos²αᵢ. Greedy pivoting on these rows —
take the coordinate of largest criterion, remove its direction from the other rows, repeat —
chooses coordinates in criterion order and never takes one whose row depends on those taken,
so the chosen rows W_I are nonsingular, which holds exactly when C_D is (C_D singular ⇔ some
tangent vector has zero independent part). The quality of a set is κ(I) = λ_min(W_I W_Iᵀ); for
k = 1 it is the paper's cos²α of the chosen coordinate.

The compact partitioned equations that integrate with these choices, and the switching
between them, are in `jaxmbs.integrate.partitioned`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import jax.scipy.linalg as jsl

from .._internal.checks import coordinate_indices
from .._internal.linalg import pivoted_rows
from .._internal.types import Array, Coordinates, MassMatrix, Model, Params
from . import algebra
from .constraints import constraint_jacobian
from .structure import with_known_structure

# --------------------------------------------------------------------------- criterion


def metric_rows(M: MassMatrix, P: Array, metric: bool = True) -> Array:
    """Rows wᵢ with |wᵢ|² = cos²αᵢ (eq 23a) from any null-space basis P (n, k) of C.

    With LLᵀ = PᵀMP and Z = P L⁻ᵀ (ZᵀMZ = I): W = Z scaled row-wise by 1/√((M⁻¹)ᵢᵢ), so
    W Wᵀ is P(PᵀMP)⁻¹Pᵀ normalised by the lengths |kᵢ|² = (M⁻¹)ᵢᵢ (eq 19). `metric=False`
    replaces M by the identity (the geometry-only criterion).
    """
    n = M.shape[0]
    if not metric:
        M = jnp.eye(n, dtype=M.dtype)
    if P.shape[1] == 0:
        return P
    diag_minv = jnp.diag(jsl.cho_solve(jsl.cho_factor(M, lower=True), jnp.eye(n, dtype=M.dtype)))
    L = jnp.linalg.cholesky(P.T @ M @ P)
    Z = jsl.solve_triangular(L, P.T, lower=True).T
    return Z / jnp.sqrt(diag_minv)[:, None]


def tangent_rows(M: MassMatrix, C: Array, metric: bool = True) -> Array:
    """`metric_rows` for the QR null-space basis of the independent constraint rows C (r, n)."""
    n, r = M.shape[0], C.shape[0]
    if r == 0:
        return metric_rows(M, jnp.eye(n, dtype=M.dtype), metric)
    return metric_rows(M, jnp.linalg.qr(C.T, mode="complete")[0][:, r:], metric)


def independent_jacobian(mechanism: Model, q, t, params) -> Array:
    """The independent rows C_I of the constraint Jacobian (the static row selection of the
    mechanism's structure)."""
    rows = jnp.asarray(mechanism.structure.independent_rows)
    return constraint_jacobian(mechanism, q, t, params)[rows]


def _at(mechanism: Model, q, t, params):
    """Concrete-or-traced evaluation point: the mechanism with its structure known, q as an
    array, params."""
    q = jnp.asarray(q)
    if not jnp.issubdtype(q.dtype, jnp.floating):
        q = q.astype(jnp.result_type(float))
    if q.shape != (mechanism.n,):
        raise ValueError(f"q must have shape ({mechanism.n},), got {q.shape}")
    params = mechanism.params if params is None else params
    return with_known_structure(mechanism, q, t), q, params


def projective_criterion(
    mechanism: Model, q: Coordinates, t=0.0, *, params: Params | None = None
) -> tuple[Array, Array]:
    """The projective criterion of every coordinate (Blajer et al. 1994, eqs 23a and 23b).

    **Arguments:**

    - `mechanism`: the mechanism (its constraint structure must be known).
    - `q`: a configuration, shape (n,); may be traced (jit, vmap).
    - `t`: time.
    - `params`: parameters (default the mechanism's).

    **Returns:** `(cos2_alpha, cos2_beta)`, each of shape (n,): the squared cosines between the
    unit vector of each coordinate and the tangent (α) or constrained (β) subspace, in the
    metric M. They are computed independently (α from a null-space basis, β from
    CM⁻¹Cᵀ), so cos²α + cos²β = 1 is a check, not an identity of the code.
    """
    mechanism, q, params = _at(mechanism, q, t, params)
    M = algebra.mass_matrix(mechanism, q, params)
    C = independent_jacobian(mechanism, q, t, params)
    W = tangent_rows(M, C)
    cos2_alpha = jnp.sum(W * W, axis=1)
    Mf = jsl.cho_factor(M, lower=True)
    if C.shape[0] == 0:
        return cos2_alpha, jnp.zeros_like(cos2_alpha)
    X = jsl.cho_solve(Mf, C.T)  # M⁻¹Cᵀ: columns of CM⁻¹ are kᵢ*⁽ᶜ⁾ (eq 18)
    Y = jsl.solve_triangular(jnp.linalg.cholesky(C @ X), X.T, lower=True)
    diag_minv = jnp.diag(jsl.cho_solve(Mf, jnp.eye(mechanism.n, dtype=M.dtype)))
    return cos2_alpha, jnp.sum(Y * Y, axis=0) / diag_minv


def svd_criterion(
    mechanism: Model, q: Coordinates, t=0.0, *, params: Params | None = None
) -> Array:
    """Geometry-only criterion: squared norms of the rows of the SVD null-space basis of C.

    cos²αᵢ of the projective criterion with M replaced by the identity; the masses do not
    enter (Blajer et al. 1994, §6, the comparison with the SVD choice). Shape (n,).
    """
    mechanism, q, params = _at(mechanism, q, t, params)
    C = independent_jacobian(mechanism, q, t, params)
    _, _, Vt = jnp.linalg.svd(C, full_matrices=True)
    null = Vt[C.shape[0] :]
    return jnp.sum(null * null, axis=0)


def set_criterion(W: Array, independent: Array) -> Array:
    """κ(I) = λ_min(W_I W_Iᵀ) of the rows W of `tangent_rows` (cos²α of q_I when k = 1)."""
    WI = W[independent]
    return jnp.maximum(jnp.linalg.eigvalsh(WI @ WI.T)[0], 0.0)


def pivoted_choice(W: Array) -> Array:
    """Criterion-ordered pivoting on the rows of W: a mask of k = W.shape[1] coordinates.

    Each pass takes the row of largest remaining squared norm (the first pass: the largest
    cos²αᵢ) and removes its direction from all rows, so a coordinate whose row depends on the
    ones taken has zero remaining norm and is never taken: W_I, hence C_D, is nonsingular
    (`jaxmbs._internal.linalg.pivoted_rows`, the structure's row selection too).
    """
    n, k = W.shape
    taken = pivoted_rows(W, k)[0]
    return jnp.zeros(n, bool).at[taken].set(True)


def permutation(mask: Array) -> Array:
    """[independent indices ascending, dependent indices ascending] from a boolean mask."""
    return jnp.argsort(jnp.where(mask, 0, 1), stable=True).astype(jnp.int32)


def independent_coordinates(
    mechanism: Model,
    q: Coordinates,
    t=0.0,
    *,
    params: Params | None = None,
    criterion: str = "projective",
) -> Array:
    """The k = n − r best independent coordinates at q, with C_D guaranteed nonsingular.

    **Arguments:** as `projective_criterion`, plus `criterion`: `"projective"` (M-weighted,
    eq 23a) or `"svd"` (geometry only).

    **Returns:** the indices of q_I in ascending order, shape (k,), chosen by criterion-ordered
    pivoting (see the module docstring); jit- and vmap-compatible.
    """
    if criterion not in ("projective", "svd"):
        raise ValueError(f"criterion must be 'projective' or 'svd', got {criterion!r}")
    mechanism, q, params = _at(mechanism, q, t, params)
    structure = mechanism.structure
    M = algebra.mass_matrix(mechanism, q, params)
    W = tangent_rows(M, independent_jacobian(mechanism, q, t, params), criterion == "svd")
    return permutation(pivoted_choice(W))[: structure.dof]


def partition_criterion(
    mechanism: Model,
    q: Coordinates,
    independent: Sequence[int | str],
    t=0.0,
    *,
    params: Params | None = None,
) -> Array:
    """Quality κ of a set of independent coordinates: λ_min(W_I W_Iᵀ) ∈ [0, 1].

    For one independent coordinate this is its cos²α (eq 23a); zero means C_D is singular.
    """
    idx = coordinate_indices(mechanism, independent)
    mechanism, q, params = _at(mechanism, q, t, params)
    structure = mechanism.structure
    if len(idx) != structure.dof:
        raise ValueError(
            f"{len(idx)} independent coordinates given; the mechanism has k = {structure.dof}"
        )
    M = algebra.mass_matrix(mechanism, q, params)
    W = tangent_rows(M, independent_jacobian(mechanism, q, t, params))
    return set_criterion(W, jnp.asarray(idx))
