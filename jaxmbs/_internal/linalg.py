"""Small, batch-friendly dense kernels and a block-tridiagonal Cholesky solver.

Two costs dominate small dense linear algebra on CPU: the fixed price of each LAPACK call
(and, under `jax.vmap`, one call after another per matrix), and the launch of each separate
XLA kernel inside a loop. The kernels here unroll a w×w factorisation into scalar arithmetic
on arrays of the batch shape, vectorised across any leading (batch or block) axes: that pays
for batches and stacks of blocks with w ≤ `MAX_BLOCK` (O(w³) unrolled operations). XLA
still emits about one kernel per entry of the factor (each entry feeds many others), so a
single matrix is cheaper in one LAPACK call (`cho_factor` picks by `jax.custom_batching`);
larger matrices always go to LAPACK.

Shapes: matrices `(..., w, w)`, right-hand sides `(..., w, k)`.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

from .types import Array

#: Largest block of M or of the band handled by unrolled kernels (beyond: LAPACK). The
#: unrolled w×w Cholesky is O(w³) fused scalar operations: at w = 12 (the McPherson strut's
#: band) it compiled 6× slower and ran 2× slower than one LAPACK block of all 26 rows.
MAX_BLOCK = 8

#: Largest matrix product (counted in scalar products) done elementwise, fused with its
#: neighbours, rather than by a library call (`product_transpose`).
SMALL_PRODUCT = 4096

#: Most contiguous pieces that `take` assembles from slices before it falls back to a gather.
MAX_PIECES = 16

Entries = list  # a w×w matrix as nested lists of arrays of the batch shape (None: zero)


def take(x: Array, *index: np.ndarray) -> Array:
    """x[index] for static integer index arrays (broadcast together) over x's leading axes;
    out-of-range entries read zero (like `x.at[index].get(mode="fill", fill_value=0)`).

    XLA's CPU gather goes element by element and does not fuse; the index maps of a
    structure (rows in reverse order, the diagonal of a diagonal M, a coordinate's block) are
    mostly a few runs with a constant stride, which become strided slices (fused with their
    neighbours, vectorised under `vmap`). Only an index of more than `MAX_PIECES` runs is
    gathered.
    """
    index = np.broadcast_arrays(*(np.asarray(i, dtype=int) for i in index))
    lead = x.shape[: len(index)]
    valid = np.ones(index[0].shape, dtype=bool)
    for i, size in zip(index, lead, strict=True):
        valid &= (i >= 0) & (i < size)
    linear = np.where(
        valid, np.ravel_multi_index(tuple(np.where(valid, i, 0) for i in index), lead), -1
    )
    flat = x.reshape(-1, *x.shape[len(index) :])
    pieces = _runs(linear.reshape(-1))
    if len(pieces) > MAX_PIECES:
        outside = np.where(linear < 0, flat.shape[0], linear)
        return flat.at[outside].get(mode="fill", fill_value=0.0)
    parts = []
    for start, stop, step in pieces:
        count = stop - start
        first = int(linear.reshape(-1)[start])
        if first < 0:
            parts.append(jnp.zeros((count, *flat.shape[1:]), x.dtype))
        elif step >= 0:
            end = first + step * (count - 1) + 1
            parts.append(lax.slice_in_dim(flat, first, end, max(step, 1)))
        else:
            last = first + step * (count - 1)
            parts.append(lax.rev(lax.slice_in_dim(flat, last, first + 1, -step), (0,)))
    out = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
    return out.reshape(*linear.shape, *flat.shape[1:])


def array_module(*arrays):
    """NumPy where every one of `arrays` is a NumPy array (constants: what follows from them
    is computed once while tracing), else jax.numpy."""
    return np if all(isinstance(x, np.ndarray) for x in arrays) else jnp


def unit(v: Array) -> Array:
    """v / |v| of one vector, in NumPy for a NumPy v (`array_module`)."""
    return v / array_module(v).linalg.norm(v)


def _cycle(x: Array) -> Array:
    """(x₂, x₃, x₁) of 3-vectors along the last axis: two slices and a concatenation."""
    return jnp.concatenate([x[..., 1:], x[..., :1]], axis=-1)


def cross(a: Array, b: Array) -> Array:
    """a × b of 3-vectors along the last axis (broadcast), as cyclic shifts:

        a × b = P (a ⊙ P b − P a ⊙ b),   P (x₁, x₂, x₃) = (x₂, x₃, x₁),

    since (a ⊙ P b − P a ⊙ b)ₖ = aₖ bₖ₊₁ − aₖ₊₁ bₖ is the component k + 2 (mod 3) of a × b.
    Twelve whole-vector operations where `jnp.cross` takes each of the six components apart
    (25); the joints and the MJCF import evaluate it under two or three nested derivatives.
    NumPy operands give `np.cross` (`array_module`).
    """
    if array_module(a, b) is np:
        return np.cross(a, b)
    return _cycle(a * _cycle(b) - _cycle(a) * b)


def _runs(linear: np.ndarray) -> list[tuple[int, int, int]]:
    """Split a flat index into (start, stop, step) runs of constant stride (−1 entries: zero
    runs; a run of one entry has step 0)."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    while start < linear.size:
        stop, step = start + 1, 0
        if linear[start] < 0:
            while stop < linear.size and linear[stop] < 0:
                stop += 1
        elif (
            start + 1 < linear.size
            and linear[start + 1] >= 0
            and linear[start + 1] != linear[start]
        ):
            step = int(linear[start + 1] - linear[start])
            while (
                stop < linear.size and linear[stop] >= 0 and linear[stop] - linear[stop - 1] == step
            ):
                stop += 1
        runs.append((start, stop, step))
        start = stop
    return runs


def _materialized(x: Array) -> Array:
    """x behind an optimisation barrier. XLA's CPU pipeline removes barriers before its
    fusion pass (the optimised program holds none), so this does not by itself keep x
    stored; it keeps the passes before fusion (simplification, CSE) from rewriting across
    it, which measurably shortens the unrolled kernels' programs (chain N = 50 RHS 31 µs with
    the barriers, 38 µs without; benchmarks/README.md)."""
    return lax.optimization_barrier(x)


def _library_unless_vmapped(library: Callable, vectorised: Callable) -> Callable:
    """fn(*arrays) computed by `library` (one LAPACK call per problem), or under `jax.vmap`
    by `vectorised` on the whole batch (unbatched arguments broadcast), whose arithmetic is
    vectorised across the samples (`jax.custom_batching`). On CPU a batched LAPACK routine
    loops over the matrices, while one matrix is cheaper in one call than in the unrolled
    kernels."""

    @jax.custom_batching.custom_vmap
    def fn(*args):
        return library(*args)

    @fn.def_vmap
    def _(axis_size: int, in_batched: list[bool], *args):
        if not any(in_batched):
            out = library(*args)
            return out, jax.tree_util.tree_map(lambda _: False, out)
        args = [
            x if batched else jnp.broadcast_to(x, (axis_size, *x.shape))
            for x, batched in zip(args, in_batched, strict=True)
        ]
        out = vectorised(*args)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return fn


def _unpack(A: Array, trailing: bool = False) -> Entries:
    """Entries of (..., w, w) matrices; `trailing` keeps a unit axis to meet (..., k) vectors."""
    w = A.shape[-1]
    if trailing:
        return [[A[..., i, j, None] for j in range(w)] for i in range(A.shape[-2])]
    return [[A[..., i, j] for j in range(w)] for i in range(A.shape[-2])]


def stack_matrix(rows) -> Array:
    """The matrix (..., r, c) of r rows of c entries of one batch shape: one stack of all
    entries and a reshape (nested stacks cost a stack per row more, in every derivative)."""
    flat = jnp.stack([entry for row in rows for entry in row], axis=-1)
    return flat.reshape(*flat.shape[:-1], len(rows), len(rows[0]))


def _pack(a: Entries, like: Array) -> Array:
    zero = jnp.zeros_like(like)
    return stack_matrix([[zero if x is None else x for x in row] for row in a])


def _cholesky(a: Entries) -> Entries:
    """Lower factor entry by entry: L_jj = √(a_jj − Σ_k L_jk²),
    L_ij = (a_ij − Σ_k L_ik L_jk) / L_jj."""
    w = len(a)
    L: Entries = [[None] * w for _ in range(w)]
    for j in range(w):
        s = a[j][j]
        for k in range(j):
            s = s - L[j][k] * L[j][k]
        L[j][j] = jnp.sqrt(s)
        inverse = 1.0 / L[j][j]
        for i in range(j + 1, w):
            s = a[i][j]
            for k in range(j):
                s = s - L[i][k] * L[j][k]
            L[i][j] = s * inverse
    return L


def _solve_lower(L: Entries, b: list) -> list:
    """Forward substitution L x = b (b: a list of w arrays)."""
    x: list = []
    for i in range(len(L)):
        s = b[i]
        for k in range(i):
            s = s - L[i][k] * x[k]
        x.append(s / L[i][i])
    return x


def _solve_lower_transpose(L: Entries, b: list) -> list:
    """Back substitution Lᵀ x = b."""
    w = len(L)
    x: list = [None] * w
    for i in reversed(range(w)):
        s = b[i]
        for k in range(i + 1, w):
            s = s - L[k][i] * x[k]
        x[i] = s / L[i][i]
    return x


def cholesky(A: Array) -> Array:
    """Lower Cholesky factor L of symmetric positive definite matrices, A = L Lᵀ."""
    if A.shape[-1] > MAX_BLOCK:
        return jnp.linalg.cholesky(A)
    return _materialized(_pack(_cholesky(_unpack(A)), A[..., 0, 0]))


def cho_factor(A: Array) -> Array:
    """Lower Cholesky factor of symmetric positive definite A (w, w).

    One matrix takes one LAPACK call: cheaper than the w(w+1)/2 scalar kernels of the
    unrolled factorisation, whose entries depend on each other one by one (on the four-bar,
    8×8: 0.5 µs against 1.3 µs per factorisation and solve). Under `jax.vmap` the batched
    LAPACK routine loops over the matrices on CPU, so the batch is factorised by the
    unrolled kernel instead, vectorised across the samples (`jax.custom_batching`).
    """
    if A.shape[-1] > MAX_BLOCK:
        return jnp.linalg.cholesky(A)
    return _cholesky_single_or_batched(A)


_cholesky_single_or_batched = _library_unless_vmapped(jnp.linalg.cholesky, cholesky)


class SpdFactor(NamedTuple):
    """A = G Gᵀ + diag(shift), symmetric positive definite (w, w), kept as its Gram factor
    G (w, m) and shift (w,), with the lower Cholesky factor of A (`spd_factor`)."""

    gram: Array
    shift: Array
    lower: Array


def spd_factor(G: Array, shift: Array) -> SpdFactor:
    """Factor A = G Gᵀ + diag(shift) (`cho_factor`), for any number of `spd_solve` calls."""
    return SpdFactor(G, shift, cho_factor(product_transpose(G, G) + jnp.diag(shift)))


def spd_solve(f: SpdFactor, b: Array) -> Array:
    """x with A x = b (b: (w,)) for the A of `spd_factor`.

    One system takes LAPACK's triangular solves with the stored factor, as do matrices
    larger than `MAX_BLOCK`. Under `jax.vmap` (`jax.custom_batching`), with no LAPACK call:

    - a batch of smaller systems is solved from G and the shift by the unrolled
      factorisation and substitutions on the batch-last layout (`_spd_solve_batch_last`);
      the stored factor goes unused, and XLA removes its computation from the vmapped
      program;
    - one matrix with a batch of right-hand sides (e.g. forward-mode tangents) takes the
      unrolled substitutions with the stored factor, vectorised across the batch.
    """
    if f.lower.shape[-1] > MAX_BLOCK:
        return jsl.cho_solve((f.lower, True), b)
    return _spd_solve_small(f.gram, f.shift, f.lower, b)


@jax.custom_batching.custom_vmap
def _spd_solve_small(G: Array, shift: Array, L: Array, b: Array) -> Array:
    return jsl.cho_solve((L, True), b)


@_spd_solve_small.def_vmap
def _(axis_size: int, in_batched: list[bool], G: Array, shift: Array, L: Array, b: Array):
    if not any(in_batched):
        return jsl.cho_solve((L, True), b), False
    G, shift, L, b = (
        x if batched else jnp.broadcast_to(x, (axis_size, *x.shape))
        for x, batched in zip((G, shift, L, b), in_batched, strict=True)
    )
    if any(in_batched[:3]):
        return _spd_solve_batch_last(G, shift, b), True
    return _cho_substitute(_unpack(L), [b[:, i] for i in range(b.shape[-1])]), True


def _cho_substitute(L: Entries, b: list) -> Array:
    """x with L Lᵀ x = b from the entries of L: forward, then back substitution (x stacked
    on the last axis)."""
    return jnp.stack(_solve_lower_transpose(L, _solve_lower(L, b)), axis=-1)


def _spd_solve_batch_last(G: Array, shift: Array, b: Array) -> Array:
    """A⁻¹ b with A = G Gᵀ + diag(shift) for a batch (B, w, m), (B, w), (B, w): the
    unrolled Cholesky factorisation and substitutions on the entries as vectors over the
    samples.

    Vectorised across the samples, each kernel must read its operands with unit stride:
    on the (B, w, w) layout every entry of A is a strided slice, and LLVM emits scalar
    code for it (the same arithmetic there took 277 µs per factorisation and solve against
    107 µs batch-last, 8×8, B = 1024, one core). G is therefore stored batch-last first
    (`_batch_last`), and each entry A_ij = Σ_k G_ik G_jk + δ_ij shift_i is formed from it
    inside the kernel of L_ij that reads it.
    """
    w = G.shape[-2]
    G_stored = jnp.moveaxis(_batch_last(G), -1, 0)  # G again, read from the (w, m, B) copy
    A = gram(G_stored, G_stored)  # (B, w, w), each entry fused into the kernel reading it
    s_t, b_t = jnp.moveaxis(shift, 0, -1), jnp.moveaxis(b, 0, -1)
    a = [[A[:, i, j] + (s_t[i] if i == j else 0.0) for j in range(w)] for i in range(w)]
    return _cho_substitute(_cholesky(a), [b_t[i] for i in range(w)])


def _batch_last(x: Array) -> Array:
    """x (B, w, ...) stored with the batch axis last, as (w, ..., B).

    XLA would fuse a transpose into every consumer (or undo it by laying x out batch-first),
    so the kernels reading x would still read it with a stride; a concatenation with several
    users is stored. Each of the w pieces is flattened, which fixes its element order."""
    pieces = [jnp.moveaxis(x[:, i], 0, -1).reshape(-1) for i in range(x.shape[1])]
    return jnp.concatenate(pieces).reshape(*x.shape[1:], x.shape[0])


def solve_lower(L: Array, B: Array) -> Array:
    """X with L X = B for lower-triangular L."""
    if L.shape[-1] > MAX_BLOCK:
        return jsl.solve_triangular(L, B, lower=True)
    b = [B[..., i, :] for i in range(B.shape[-2])]
    return _materialized(jnp.stack(_solve_lower(_unpack(L, trailing=True), b), axis=-2))


def solve_lower_transpose(L: Array, B: Array) -> Array:
    """X with Lᵀ X = B for lower-triangular L."""
    if L.shape[-1] > MAX_BLOCK:
        return jsl.solve_triangular(L, B, lower=True, trans="T")
    b = [B[..., i, :] for i in range(B.shape[-2])]
    return _materialized(jnp.stack(_solve_lower_transpose(_unpack(L, trailing=True), b), axis=-2))


def unrolled_sum(x: Array, axis: int) -> Array:
    """Sum over one (short) axis as a chain of additions of slices.

    A `jnp.sum` of a product is recognised by XLA's CPU backend as a contraction and handed
    to a library kernel, which costs far more than the arithmetic on small, batched
    operands; additions of slices fuse with their neighbours and vectorise over the batch.
    """
    axis = axis % x.ndim
    parts = [lax.index_in_dim(x, k, axis, keepdims=False) for k in range(x.shape[axis])]
    return functools.reduce(operator.add, parts)


def gram(A: Array, B: Array) -> Array:
    """A Bᵀ as a sum of outer products of columns, Σ_k a_k b_kᵀ: elementwise operations that
    fuse into one kernel and vectorise over leading (batch) axes (a reduction would be
    handed to a library kernel, the full product A[:, None] * B[None] stored first)."""
    terms = [A[..., :, None, k] * B[..., None, :, k] for k in range(A.shape[-1])]
    return _materialized(functools.reduce(operator.add, terms))


def product_transpose(A: Array, B: Array) -> Array:
    """A Bᵀ: elementwise (`gram`, fused with its neighbours) when small, else a library
    product. On CPU a library product of an 8×9 matrix costs a microsecond of call
    overhead, most of a small mechanism's right-hand side."""
    if A.shape[-2] * B.shape[-2] * A.shape[-1] <= SMALL_PRODUCT:
        return gram(A, B)
    return A @ _transpose(B)


def _transpose(A: Array) -> Array:
    return jnp.swapaxes(A, -1, -2)


def orthonormal_rows(A: Array, passes: int = 1) -> tuple[Array, Array]:
    """Orthonormal rows Q spanning the rows of A (..., r, n), r ≤ n, and the pivots |R_kk| of
    the QR factorisation Aᵀ = Qᵀ R.

    A single matrix takes one LAPACK (Householder) QR. Stacks, and batches under `jax.vmap`
    (`jax.custom_batching`), with r ≤ `MAX_BLOCK` take modified Gram–Schmidt on the rows in
    order, vector operations vectorised across the batch with no library call: v_k is row k
    minus its components along the rows before it, R_kk = |v_k| and q_k = v_k / R_kk (the
    same |R_kk| as Householder QR). One pass gives R_kk to working accuracy; `passes=2`
    re-orthogonalises (Q orthonormal to round-off). Where a row lies in the span of the
    rows before it, R_kk ≈ 0 and its row of Q is zero (Gram–Schmidt) or any unit vector
    orthogonal to the others (Householder).
    """
    if A.shape[-2] > MAX_BLOCK:
        return _householder_rows(A)
    if A.ndim == 2:
        return _single_or_batched_rows(passes)(A)
    return _gram_schmidt_rows(A, passes)


def _householder_rows(A: Array) -> tuple[Array, Array]:
    Q, R = jnp.linalg.qr(_transpose(A))
    return _transpose(Q), jnp.abs(jnp.diagonal(R, axis1=-2, axis2=-1))


def _gram_schmidt_rows(A: Array, passes: int) -> tuple[Array, Array]:
    basis: list = []
    pivots = []
    for k in range(A.shape[-2]):
        v = A[..., k, :]
        for _ in range(passes):
            for q in basis:
                v = v - unrolled_sum(q * v, -1)[..., None] * q
        norm = jnp.sqrt(unrolled_sum(v * v, -1))
        pivots.append(norm)
        basis.append(v / jnp.where(norm > 0.0, norm, 1.0)[..., None])
    return jnp.stack(basis, axis=-2), jnp.stack(pivots, axis=-1)


@functools.cache
def _single_or_batched_rows(passes: int):
    """A ↦ `orthonormal_rows(A)` for one matrix: Householder QR, and Gram–Schmidt (`passes`)
    when vmapped."""
    return _library_unless_vmapped(_householder_rows, lambda A: _gram_schmidt_rows(A, passes))


def pivoted_rows(W, steps: int, basis=None, xp=jnp) -> tuple:
    """The rows of W (r, k) in the order of Gram–Schmidt with pivoting on their norms — the
    column-pivoted QR of Wᵀ by modified Gram–Schmidt: each of `steps` passes takes the row of
    largest remaining norm (the first of equal ones), R_ii = its norm, and removes its
    direction from every row, so a row in the span of those taken has norm zero and comes
    last. The rows are first projected onto the orthogonal complement of the orthonormal
    rows of `basis`. One algorithm for the concrete analyses (`xp=np`: float64 whatever
    JAX's precision, the structure's rank and redundancy) and traced ones (`xp=jnp`: the
    choice of independent coordinates along a motion; `steps` static, the loop unrolled).

    **Returns:** the rows taken, in order (`steps`,), their norms R_ii when taken (in exact
    arithmetic non-increasing), and the orthonormal directions (`steps`, k).
    """
    r, k = W.shape
    if steps == 0:
        return xp.zeros((0,), int), xp.zeros((0,), W.dtype), xp.zeros((0, k), W.dtype)
    residual = W if basis is None else W - (W @ basis.T) @ basis
    taken = xp.zeros(r, bool)
    order, pivots, directions = [], [], []
    for _ in range(steps):
        norms = xp.where(taken, -1.0, xp.sum(residual * residual, axis=1))
        i = xp.argmax(norms)
        pivot = xp.sqrt(xp.maximum(norms[i], 0.0))
        direction = residual[i] / xp.maximum(pivot, xp.finfo(W.dtype).tiny)
        residual = residual - xp.outer(residual @ direction, direction)
        taken = taken | (xp.arange(r) == i)
        order.append(i)
        pivots.append(pivot)
        directions.append(direction)
    return xp.stack(order), xp.stack(pivots), xp.stack(directions)


class BlockTridiagonalFactor(NamedTuple):
    """Block cyclic reduction of a block-tridiagonal A (see `block_tridiagonal_factor`).

    `levels` holds, per level, the Cholesky factors L_o of the odd-numbered diagonal blocks
    and W_l = L_o⁻¹ A[odd, left], W_r = L_o⁻¹ A[odd, right]; `last` the factor of the
    single block left at the end.
    """

    levels: tuple[tuple[Array, Array, Array], ...]
    last: Array


def block_tridiagonal_factor(D: Array, E: Array) -> BlockTridiagonalFactor:
    """Factorise a symmetric positive definite block-tridiagonal A by block cyclic reduction.

    **Arguments:**

    - `D`: diagonal blocks A[k, k], shape (nb, w, w), w ≤ `MAX_BLOCK` unless nb = 1.
    - `E`: sub-diagonal blocks A[k+1, k], shape (nb, w, w) (the last one is not used).

    The odd-numbered blocks are eliminated all at once (a batch of Cholesky factorisations
    L_o of their diagonal blocks), which leaves a block-tridiagonal Schur complement on the
    even-numbered blocks,

        D'_t = D_2t − W_lᵀW_l (odd 2t+1) − W_rᵀW_r (odd 2t−1),   A'[t+1, t] = −W_rᵀ W_l,

    with W_l = L_o⁻¹ A[odd, left], W_r = L_o⁻¹ A[odd, right]; the recursion halves nb until
    one block is left. This is Cholesky in odd–even order: as stable, O(nb w³) work, but
    only O(log nb) sequential steps, each one vectorised over the blocks (and over a vmapped
    batch).
    """
    levels = []
    while D.shape[0] > 1:
        nb, w = D.shape[:2]
        if w > MAX_BLOCK:
            raise ValueError(f"blocks larger than {MAX_BLOCK} must come as one block")
        n_odd, n_even = nb // 2, nb - nb // 2
        E = E.at[nb - 1].set(0.0)  # no coupling beyond the last block
        L_o = cholesky(D[1::2])
        left, right = E[0::2][:n_odd], _transpose(E[1::2][:n_odd])  # A[odd, 2t], A[odd, 2t+2]
        W = solve_lower(L_o, jnp.concatenate([left, right], axis=-1))
        W_l, W_r = W[..., :w], W[..., w:]
        zero = jnp.zeros((1, w, w), D.dtype)
        left_gram = gram(_transpose(W_l), _transpose(W_l))
        right_gram = gram(_transpose(W_r), _transpose(W_r))
        D = (
            D[0::2]
            - jnp.concatenate([left_gram, zero])[:n_even]
            - jnp.concatenate([zero, right_gram])[:n_even]
        )
        E = jnp.concatenate([-gram(_transpose(W_r), _transpose(W_l)), zero])[:n_even]
        levels.append((L_o, W_l, W_r))
    last = jnp.linalg.cholesky(D[0]) if D.shape[-1] > MAX_BLOCK else cholesky(D[0])
    return BlockTridiagonalFactor(tuple(levels), last)


def block_tridiagonal_solve(factor: BlockTridiagonalFactor, b: Array) -> Array:
    """Solve A x = b with A factorised by `block_tridiagonal_factor`; b in blocks (nb, w).

    Linear in b: forward elimination of the odd blocks level by level, the last block, then
    back substitution x_odd = L_o⁻ᵀ (L_o⁻¹ b_odd − W_l x_left − W_r x_right).
    """
    reduced = []
    for L_o, W_l, W_r in factor.levels:
        n_odd, n_even = L_o.shape[0], b.shape[0] - L_o.shape[0]
        w_b = solve_lower(L_o, b[1::2, :, None])[..., 0]
        zero = jnp.zeros((1, b.shape[1]), b.dtype)
        b_l = unrolled_sum(W_l * w_b[..., None], -2)  # W_lᵀ w_b
        b_r = unrolled_sum(W_r * w_b[..., None], -2)
        reduced.append((b, w_b))
        b = b[0::2] - jnp.concatenate([b_l, zero])[:n_even] - jnp.concatenate([zero, b_r])[:n_even]
    L = factor.last
    if L.shape[-1] > MAX_BLOCK:
        x = jsl.cho_solve((L, True), b[0])[None]
    else:
        x = solve_lower_transpose(L, solve_lower(L, b[0][:, None]))[None, :, 0]
    for (L_o, W_l, W_r), (_, w_b) in zip(reversed(factor.levels), reversed(reduced), strict=True):
        n_odd = L_o.shape[0]
        x_right = jnp.concatenate([x[1:], jnp.zeros_like(x[:1])])[:n_odd]
        rhs = w_b - unrolled_sum(W_l * x[:n_odd, None, :], -1)
        rhs = rhs - unrolled_sum(W_r * x_right[:, None, :], -1)
        x = _interleave(x, solve_lower_transpose(L_o, rhs[..., None])[..., 0])
    return x


def _interleave(x_even: Array, x_odd: Array) -> Array:
    """Blocks 0, 2, 4, … and 1, 3, 5, … back in order."""
    n_odd = x_odd.shape[0]
    pairs = jnp.stack([x_even[:n_odd], x_odd], axis=1).reshape(2 * n_odd, *x_odd.shape[1:])
    return jnp.concatenate([pairs, x_even[n_odd:]])
