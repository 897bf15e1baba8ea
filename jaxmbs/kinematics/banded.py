"""Sparse range-space solve of the equations of motion (the `"banded"` formulation).

With the independent constraint rows R (Pękal–Frączek 2016, eq 2.5 on C_R) and a
block-diagonal M = L Lᵀ, eliminating q̈ gives the Wang–Huston form (eqs 3.40–3.41)

    G = C_R L⁻ᵀ,    (G Gᵀ) λ_R = G L⁻¹Q − Γ_R,    q̈ = L⁻ᵀ (L⁻¹Q − Gᵀ λ_R).

A = G Gᵀ = C_R M⁻¹ C_Rᵀ is symmetric positive definite. The static
`jaxmbs.kinematics.sparsity.BandPlan` decides how it is factorised:

- one dense block (small or hardly banded systems): a LAPACK Cholesky of A for one
  system; across a vmapped batch, unrolled kernels that factorise A within each solve
  (`jaxmbs._internal.linalg.spd_solve`);
- block-tridiagonal (chains, trees, long loops in reverse Cuthill–McKee order): the blocks
  of A are formed from the few columns each block of rows touches, and factorised by block
  cyclic reduction (`jaxmbs._internal.linalg.block_tridiagonal_factor`) — O(n) work per evaluation.

`factor` depends on M and C only and `solve` is linear in (Q, Γ), so a derivative costs one
more `solve` with the same factors, and several right-hand sides share one factorisation
(`range_space_solver`; the chord Newton of the projection).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._internal import linalg
from .._internal.types import Array
from .compressed import StoredJacobian
from .sparsity import BandPlan


class RangeSpaceFactor(NamedTuple):
    """Factors of M and of A = C_R M⁻¹ C_Rᵀ.

    - `mass`: Cholesky factors of the diagonal blocks of M, shape (nMb, b, b).
    - `G`: C_R L⁻ᵀ; dense (r, nMb·b) for one block, else per block of rows on its window of
      columns, (nb, w, Wb·b).
    - `schur`: for one block, A kept as G and the padding shift with its Cholesky factor
      (`jaxmbs._internal.linalg.SpdFactor`); else its block cyclic reduction.
    """

    mass: Array
    G: Array
    schur: linalg.SpdFactor | linalg.BlockTridiagonalFactor


def _mass_blocks(plan: BandPlan, M: Array) -> Array:
    """The diagonal blocks of M (identity on padding slots), shape (nMb, b, b)."""
    blocks = plan.mass_blocks
    pad = (blocks == M.shape[0])[:, :, None] * np.eye(blocks.shape[1])
    return linalg.take(M, blocks[:, :, None], blocks[:, None, :]) + jnp.asarray(pad, M.dtype)


def mass_matvec(plan: BandPlan, M: Array, x: Array) -> Array:
    """M x from the diagonal blocks of M only (O(n b))."""
    x_b = linalg.take(x, plan.mass_blocks)
    y = linalg.unrolled_sum(_mass_blocks(plan, M) * x_b[:, None, :], -1)
    return linalg.take(y, plan.block_of, plan.slot_of)


def _factor_operand(L_m: Array) -> Array:
    """What `_times_mass_factor_inverse` multiplies by, formed once per block of M: the
    inverse L_a⁻¹ of blocks larger than 1×1, so that G is one fused elementwise kernel (a
    substitution stacks its b results along the minor axis, which under `vmap` is a slow
    interleaving copy of the whole of G: McPherson strut, 1024 samples, ~11 of ~47 µs per
    sample); 1×1 blocks keep L itself and a division (with products by L⁻¹ in every solve
    instead, the four-bar's reverse gradient ran ~7 % slower)."""
    b = L_m.shape[-1]
    if b == 1:
        return L_m
    return linalg.solve_lower(L_m, jnp.broadcast_to(jnp.eye(b, dtype=L_m.dtype), L_m.shape))


def _times_mass_factor_inverse(operand: Array, C_b: Array) -> Array:
    """Rows of C (in M-block layout, (..., nMb, b)) times L⁻ᵀ: per block L_a⁻¹ c_aᵀ, with
    the blocks' `_factor_operand`."""
    b = C_b.shape[-1]
    if b == 1:
        L = jnp.broadcast_to(operand, (*C_b.shape, b))
        return linalg.solve_lower(L, C_b[..., None])[..., 0]
    return linalg.unrolled_sum(operand * C_b[..., None, :], -1)


def mass_factor(plan: BandPlan, M: Array) -> Array:
    """Cholesky factors of the diagonal blocks of M, shape (nMb, b, b) (not finite where M
    is not positive definite)."""
    return linalg.cholesky(_mass_blocks(plan, M))


def factor(plan: BandPlan, M: Array, C: StoredJacobian) -> RangeSpaceFactor:
    """Factorise M (block by block) and A = G Gᵀ on the plan's rows of C (dense, or its
    entries read from the probes of a `CompressedJacobian`)."""
    return _factor_rows(plan, mass_factor(plan, M), C)


def _factor_rows(plan: BandPlan, L_m: Array, C: StoredJacobian) -> RangeSpaceFactor:
    """`factor` with the factors L_m of M's diagonal blocks given."""
    nb, w = plan.rows.shape
    operand = _factor_operand(L_m)
    if nb == 1:
        rows = plan.rows[0]
        C_b = C.take(rows[:, None, None], plan.mass_blocks[None])  # (r, nMb, b)
        G = _times_mass_factor_inverse(operand, C_b).reshape(rows.shape[0], -1)
        shift = jnp.asarray(plan.padded[0], L_m.dtype)  # padding: r = 0
        return RangeSpaceFactor(L_m, G, linalg.spd_factor(G, shift))
    # The padding block is the identity, for L and for L⁻¹ alike.
    L_w = jnp.concatenate([operand, jnp.eye(L_m.shape[-1], dtype=L_m.dtype)[None]])[plan.windows]

    def window(rows):  # (nb, w) rows on each block's window of columns -> (nb, w, Wb·b)
        C_w = C.take(rows[:, :, None, None], plan.columns[:, None])
        return _times_mass_factor_inverse(L_w[:, None], C_w).reshape(nb, w, -1)

    G, G_next = window(plan.rows), window(plan.next_rows)
    D = linalg.gram(G, G) + jnp.asarray(plan.padded[:, :, None] * np.eye(w), L_m.dtype)
    return RangeSpaceFactor(L_m, G, linalg.block_tridiagonal_factor(D, linalg.gram(G_next, G)))


def elimination_order(plan: BandPlan) -> np.ndarray:
    """The plan's rows (padding included) in the order the factorisation of A eliminates
    them: block cyclic reduction takes the odd-numbered blocks first, then the odd ones of
    the blocks left, and so on; the last block remaining comes last."""
    blocks, order = np.arange(plan.rows.shape[0]), []
    while blocks.size > 1:
        order.extend(blocks[1::2])
        blocks = blocks[0::2]
    order.extend(blocks)
    return plan.rows[np.asarray(order)].reshape(-1)


def gram_pivots(plan: BandPlan, C: StoredJacobian) -> Array:
    """Pivots L_kk of the Cholesky factorisation of C_R C_Rᵀ, rows in `elimination_order`
    (padding rows: 1). In exact arithmetic L_kk = |R_kk| of the QR factorisation of C_Rᵀ with
    its columns in that order (C_R C_Rᵀ = Rᵀ R): the distance of each row from the span of
    the rows before it, at O(n) cost on a banded C_R. Squaring C costs accuracy: a pivot
    carries an error of about ε‖C‖² / L_kk, so pivots much below √ε‖C‖ are noise (NaN where
    the computed Schur complement is negative)."""
    nMb, b = plan.mass_blocks.shape
    identity = jnp.broadcast_to(jnp.eye(b, dtype=C.dtype), (nMb, b, b))
    schur = _factor_rows(plan, identity, C).schur
    if plan.rows.shape[0] > 1:  # block cyclic reduction
        factors = [L_o for L_o, _, _ in schur.levels] + [schur.last[None]]
        return jnp.concatenate([jnp.diagonal(L, axis1=-2, axis2=-1).reshape(-1) for L in factors])
    return jnp.diagonal(schur.lower)


def solve(plan: BandPlan, f: RangeSpaceFactor, Q: Array, gamma: Array) -> tuple[Array, Array]:
    """q̈ and λ (zero on the rows outside the plan) for the right-hand sides (Q, Γ)."""
    z = linalg.solve_lower(f.mass, linalg.take(Q, plan.mass_blocks)[..., None])[..., 0]
    nb, w = plan.rows.shape
    g = linalg.take(gamma, plan.rows)
    if nb == 1:
        rhs = linalg.unrolled_sum(f.G * z.reshape(-1), -1) - g[0]
        lam = linalg.spd_solve(f.schur, rhs)[None]
        G_t_lam = linalg.unrolled_sum(f.G * lam[0][:, None], 0).reshape(z.shape)
    else:
        z_w = jnp.concatenate([z, jnp.zeros_like(z[:1])])[plan.windows].reshape(nb, -1)
        rhs = linalg.unrolled_sum(f.G * z_w[:, None, :], -1) - g
        lam = linalg.block_tridiagonal_solve(f.schur, rhs)
        per_window = linalg.unrolled_sum(f.G * lam[..., None], 1).reshape(nb, -1, z.shape[-1])
        G_t_lam = jnp.zeros((z.shape[0] + 1, z.shape[1]), z.dtype).at[plan.windows].add(per_window)
        G_t_lam = G_t_lam[:-1]
    qdd = linalg.solve_lower_transpose(f.mass, (z - G_t_lam)[..., None])[..., 0]
    position = np.full(gamma.shape[0], lam.size)  # of each row in `plan.rows` (or none)
    position[plan.rows[plan.rows < gamma.shape[0]]] = np.flatnonzero(
        plan.rows.reshape(-1) < gamma.shape[0]
    )
    lam_all = linalg.take(lam.reshape(-1), position)
    return linalg.take(qdd, plan.block_of, plan.slot_of), lam_all


def range_space_solver(
    plan: BandPlan, M: Array, C: StoredJacobian
) -> Callable[[Array, Array], tuple[Array, Array]]:
    """(Q, Γ) ↦ (q̈, λ) of M q̈ + C_Rᵀλ_R = Q, C_R q̈ = Γ_R, with M and C factorised once
    (`factor`) for any number of right-hand sides (λ is zero on the rows outside the plan).

    The solution is differentiated implicitly (`jax.lax.custom_linear_solve` on the
    symmetric operator K = [[M, C_Rᵀ], [C_R, 0]]): differentiating K x = b gives
    K x' = b' − K' x, one more `solve` with the same factors, i.e. right-hand sides
    (dQ − dM q̈ − dC_Rᵀλ_R, dΓ_R − dC_R q̈); reverse mode transposes K⁻¹ by solving with K
    again (K is symmetric). The factorisation itself is never differentiated.
    """
    k = C.shape[0]
    rows = plan.rows.reshape(-1)
    rows = rows[rows < k]  # R, in the plan's order
    position = np.full(k, rows.size)  # of each constraint row in R (or none: zero)
    position[rows] = np.arange(rows.size)
    factors = factor(plan, jax.lax.stop_gradient(M), jax.lax.stop_gradient(C))

    def split(x):
        n_q = x.shape[0] - rows.size
        return x[:n_q], x[n_q:]

    def matvec(x):
        # Formed here, not outside: only derivatives evaluate the operator, and a value
        # closed over would be computed in every solve.
        C_R = linalg.take(C.dense(), rows)
        qdd, lam_R = split(x)
        return jnp.concatenate([mass_matvec(plan, M, qdd) + C_R.T @ lam_R, C_R @ qdd])

    def solve_rhs(_, b):
        Q, gamma_R = split(b)
        qdd, lam = solve(plan, factors, Q, linalg.take(gamma_R, position))
        return jnp.concatenate([qdd, linalg.take(lam, rows)])

    def apply(Q: Array, gamma: Array) -> tuple[Array, Array]:
        # One vector b = [Q; Γ_R], not a pair: reverse mode transposes the solve only when
        # every part of b depends on the differentiated inputs, and a pair whose Γ part
        # does not (a constant Γ) would fail there.
        b = jnp.concatenate([Q, linalg.take(gamma, rows)])
        qdd, lam_R = split(jax.lax.custom_linear_solve(matvec, b, solve_rhs, symmetric=True))
        return qdd, linalg.take(lam_R, position)

    return apply


def range_space_solve(
    plan: BandPlan, M: Array, Q: Array, C: StoredJacobian, gamma: Array
) -> tuple[Array, Array]:
    """q̈ and λ of M q̈ + C_Rᵀλ_R = Q, C_R q̈ = Γ_R (see `range_space_solver`)."""
    return range_space_solver(plan, M, C)(Q, gamma)
