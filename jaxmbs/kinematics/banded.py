"""The band plan and the sparse range-space kernels of the banded algebra (the `"banded"`
formulation, the projection, the rank screen).

With the independent constraint rows R (Pękal–Frączek 2016, eq 2.5 on C_R) and a
block-diagonal M = L Lᵀ, eliminating q̈ gives the Wang–Huston form (eqs 3.40–3.41)

    G = C_R L⁻ᵀ,    (G Gᵀ) λ_R = G L⁻¹Q − Γ_R,    q̈ = L⁻ᵀ (L⁻¹Q − Gᵀ λ_R).

A = G Gᵀ = C_R M⁻¹ C_Rᵀ is symmetric positive definite. The static
`BandPlan` (below) decides how it is factorised:

- one dense block (small or hardly banded systems): a LAPACK Cholesky of A for one
  system; across a vmapped batch, unrolled kernels that factorise A within each solve
  (`jaxmbs._internal.linalg.spd_solve`);
- block-tridiagonal (chains, trees, long loops in reverse Cuthill–McKee order): the blocks
  of A are formed from the few columns each block of rows touches, and factorised by block
  cyclic reduction (`jaxmbs._internal.linalg.block_tridiagonal_factor`) — O(n) work per evaluation.

`factor` depends on M and C only and `solve` is linear in (Q, Γ), so a derivative costs one
more `solve` with the same factors, and several right-hand sides share one factorisation
(`range_space_solver`; the chord Newton of the projection).

The plan (`band_plan`): with M = L Lᵀ block-diagonal, G = C_I L⁻ᵀ keeps the sparsity of C and
the Schur complement A = C_I M⁻¹ C_Iᵀ = G Gᵀ of the augmented system (Pękal–Frączek 2016,
eq 2.5; the matrix of the Wang–Huston form, eq 3.41) is banded once its rows are put in
reverse Cuthill–McKee order (`scipy.sparse.csgraph.reverse_cuthill_mckee`). The plan holds
the static index maps that gather only the columns each block of rows touches.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import sparse
from scipy.sparse import csgraph

from .._internal import linalg
from .._internal.linalg import MAX_BLOCK
from .._internal.types import Array
from .compressed import StoredJacobian
from .sparsity import Sparsity

#: Up to this many constraint rows, C M⁻¹ Cᵀ is factorised as one dense block (LAPACK).
DENSE_ROWS = 24


def _components(pattern: np.ndarray) -> list[list[int]]:
    """Connected components of a symmetric boolean pattern, each sorted, by first index."""
    _, label = csgraph.connected_components(sparse.csr_array(pattern), directed=False)
    first = {}
    for i, c in enumerate(label):
        first.setdefault(int(c), []).append(i)
    return list(first.values())


def _packed(components: list[list[int]], size: int) -> list[list[int]]:
    """Consecutive components merged into blocks of at most `size` coordinates (a block of M
    made of several components is block-diagonal itself, so its Cholesky factor is exact).
    Spatial bodies in Euler angles have M-components {x}, {y}, {z}, {φ, θ, ψ}: packed, 2 blocks
    of 3 per body instead of 4 blocks padded to 3, which halves the columns of G = C L⁻ᵀ."""
    blocks: list[list[int]] = []
    for cols in components:
        if blocks and len(blocks[-1]) + len(cols) <= size:
            blocks[-1] = sorted(blocks[-1] + cols)
        else:
            blocks.append(list(cols))
    return blocks


@dataclasses.dataclass(frozen=True, eq=False)
class BandPlan:
    """Static index maps for the block-tridiagonal factorisation of A = G Gᵀ, G = C_R L⁻ᵀ.

    Out-of-range indices (the number of constraint rows, n, or the number of M-blocks) mark
    padding and gather zeros.

    **Fields:**

    - `rows`: (nb, w) constraint rows of each block of A, in reverse Cuthill–McKee order.
    - `next_rows`: (nb, w) the rows of the following block (padding after the last).
    - `padded`: (nb, w) true for padding rows (identity on A's diagonal).
    - `mass_blocks`: (nMb, b) coordinates of each diagonal block of M (padded).
    - `windows`: (nb, Wb) the M-blocks that the rows of blocks k and k+1 touch.
    - `columns`: (nb, Wb, b) their coordinates.
    - `block_of`, `slot_of`: for each coordinate, its M-block and position in it.
    """

    rows: np.ndarray
    next_rows: np.ndarray
    padded: np.ndarray
    mass_blocks: np.ndarray
    windows: np.ndarray
    columns: np.ndarray
    block_of: np.ndarray
    slot_of: np.ndarray

    @property
    def unrolled(self) -> bool:
        """Whether every factorisation of the plan is an unrolled kernel under `vmap` (blocks
        of M and of A no larger than `MAX_BLOCK`): then a vmapped solve calls no LAPACK
        routine, which matters on CPU (see `jaxmbs.monte_carlo`). A single system's dense
        block of A goes to LAPACK (`jaxmbs._internal.linalg.cho_factor`)."""
        return max(self.mass_blocks.shape[1], self.rows.shape[1]) <= MAX_BLOCK


@functools.lru_cache(maxsize=64)
def band_plan(sparsity: Sparsity, rows: tuple[int, ...]) -> BandPlan:
    """The band plan of A = C_R M⁻¹ C_Rᵀ for the constraint rows R = `rows` (independent)."""
    n, r, k = sparsity.n, len(rows), len(sparsity.jacobian)
    blocks = _components(sparsity.mass_pattern)
    b = max(len(c) for c in blocks)
    blocks = _packed(blocks, b)
    mass_blocks = np.full((len(blocks) + 1, b), n)  # the last one: a padding block
    block_of, slot_of = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    for i, cols in enumerate(blocks):
        mass_blocks[i, : len(cols)] = cols
        block_of[cols], slot_of[cols] = i, np.arange(len(cols))
    # Which M-blocks each constraint row touches (G = C L⁻ᵀ fills whole blocks).
    touches = np.zeros((r + 1, len(blocks)), dtype=bool)
    jac = sparsity.jacobian_pattern[list(rows)]
    for i in range(r):
        touches[i, block_of[jac[i]]] = True
    adjacency = (touches[:r].astype(np.int64) @ touches[:r].T.astype(np.int64)) > 0
    # Reverse Cuthill–McKee: breadth first from a low-degree node, reversed (small bandwidth).
    order = np.arange(r)
    if r:
        graph = sparse.csr_array(adjacency & ~np.eye(r, dtype=bool))
        order = csgraph.reverse_cuthill_mckee(graph, symmetric_mode=True).astype(int)
    position = np.empty(r, dtype=int)
    position[order] = np.arange(r)
    i, j = np.nonzero(adjacency)
    w = max(1, int(np.max(np.abs(position[i] - position[j]), initial=0)))
    if r <= DENSE_ROWS or 2 * w >= r or w > MAX_BLOCK:  # small or hardly banded: one block
        w = max(r, 1)
    nb = -(-r // w) if r else 1
    local = np.full(nb * w, r)  # positions among `rows`; r marks padding
    local[:r] = order
    local = local.reshape(nb, w)
    window_sets = [
        np.flatnonzero(touches[local[q : q + 2].reshape(-1)].any(axis=0)) for q in range(nb)
    ]
    windows = np.full((nb, max(1, max(len(s) for s in window_sets))), len(blocks))
    for q, s in enumerate(window_sets):
        windows[q, : len(s)] = s
    index = np.int32  # gathers must work without jax_enable_x64 as well
    block_rows = np.append(np.asarray(rows), k)[local]
    return BandPlan(
        rows=block_rows.astype(index),
        next_rows=np.concatenate([block_rows[1:], np.full((1, w), k)]).astype(index),
        padded=local == r,
        mass_blocks=mass_blocks[:-1].astype(index),
        windows=windows.astype(index),
        columns=mass_blocks[windows].astype(index),
        block_of=block_of.astype(index),
        slot_of=slot_of.astype(index),
    )


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
