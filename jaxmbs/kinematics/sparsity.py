"""Structural sparsity of C and M, compressed Jacobians, and the band plan of C M⁻¹ Cᵀ.

Joints couple few bodies, so the constraint Jacobian C (Wojtyra–Frączek 2013, eqs 1–9) has a
handful of non-zeros per row and, for planar and spatial bodies, M is (block-)diagonal. Both
patterns are properties of the model, not of the state: they are detected once, outside jit,
next to the rank analysis of [`jaxmbs.Structure`][], and used as static data:

- **Compressed Jacobian.** Columns of C that never share a row are structurally orthogonal and
  can be probed by one Jacobian-vector product (Curtis–Powell–Reid column grouping): a greedy
  colouring of the column intersection graph needs 4 products for a planar chain of any
  length instead of n. The same grouping of M's columns gives M from a few products M s_k
  (Hessian-vector products of the kinetic energy, `jaxmbs.kinematics.inertia`): 3 for
  spatial bodies in Euler angles instead of n.
- **Band plan.** With M = L Lᵀ block-diagonal, G = C_I L⁻ᵀ keeps the sparsity of C and the
  Schur complement A = C_I M⁻¹ C_Iᵀ = G Gᵀ of the augmented system (Pękal–Frączek 2016,
  eq 2.5; the matrix of the Wang–Huston form, eq 3.41) is banded once its rows are put in
  reverse Cuthill–McKee order. The plan holds the static index maps that let
  `jaxmbs._internal.linalg` factorise A block-tridiagonally, gathering only the columns each
  block of rows touches, so a chain costs O(n) per evaluation.

Patterns are detected numerically at a few random states around the reference configuration,
with randomly perturbed parameters, so an entry that is zero only at particular parameter
values (a joint at a body's centre of mass) is still counted as a structural non-zero.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from scipy import sparse
from scipy.sparse import csgraph

from .._internal.linalg import MAX_BLOCK, SMALL_PRODUCT
from .._internal.types import Array

#: Number of random states at which the patterns are sampled.
SAMPLES = 3

#: Up to this many constraint rows, C M⁻¹ Cᵀ is factorised as one dense block (LAPACK).
DENSE_ROWS = 24


def pattern_rows(pattern: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """The column indices of the non-zeros of each row of a boolean pattern."""
    return tuple(tuple(int(j) for j in np.flatnonzero(row)) for row in pattern)


def _to_array(rows: tuple[tuple[int, ...], ...], width: int) -> np.ndarray:
    out = np.zeros((len(rows), width), dtype=bool)
    for i, cols in enumerate(rows):
        out[i, list(cols)] = True
    return out


def greedy_colouring(pattern: np.ndarray) -> np.ndarray:
    """Colours of the columns of a boolean (k, n) pattern such that no row has two non-zeros
    of one colour (greedy, columns taken in order of decreasing degree)."""
    k, n = pattern.shape
    conflict = (pattern.T.astype(np.int64) @ pattern.astype(np.int64)) > 0
    colours = np.full(n, -1)
    for j in sorted(range(n), key=lambda j: -int(pattern[:, j].sum())):
        taken = set(colours[conflict[j] & (colours >= 0)].tolist())
        colours[j] = next(c for c in range(n) if c not in taken)
    return colours


@dataclasses.dataclass(frozen=True)
class Sparsity:
    """Structural non-zeros of the constraint Jacobian C and of the mass matrix M.

    **Fields:**

    - `n`: number of coordinates.
    - `jacobian`: for each row of C = [Φ_q ; A], the columns that can be non-zero.
    - `mass`: for each row of M, the columns that can be non-zero (the diagonal always).
    - `colours`: a colour per column of C; columns of one colour never share a row.
    - `mass_colours`: the same for the columns of M.
    """

    n: int
    jacobian: tuple[tuple[int, ...], ...]
    mass: tuple[tuple[int, ...], ...]
    colours: tuple[int, ...]
    mass_colours: tuple[int, ...]

    @property
    def n_colours(self) -> int:
        """Number of Jacobian-vector products that give C."""
        return max(self.colours, default=-1) + 1

    @property
    def n_mass_colours(self) -> int:
        """Number of products M s_k that give M."""
        return max(self.mass_colours, default=-1) + 1

    @property
    def jacobian_pattern(self) -> np.ndarray:
        """Boolean (m + h, n) pattern of C."""
        return _to_array(self.jacobian, self.n)

    @property
    def mass_pattern(self) -> np.ndarray:
        """Boolean (n, n) pattern of M."""
        return _to_array(self.mass, self.n)

    def probes(self, fn: Callable[[Array], Array], x: Array) -> Array:
        """The Jacobian-vector products C s_k of `fn` at `x` along the colour groups s_k,
        shape (n_colours, rows): C[i, j] = (C s_colour(j))[i] on the pattern."""
        return jax.vmap(lambda v: jax.jvp(fn, (x,), (v,))[1])(_seeds(self.colours, x.dtype))

    def mass_probes(self, product: Callable[[Array], Array], dtype) -> Array:
        """M s_k for the colour groups s_k of M's columns, shape (n_mass_colours, n), from
        `product(v) = M v`."""
        return jax.vmap(product)(_seeds(self.mass_colours, dtype))

    def spread_mass(self, probes: Array) -> Array:
        """The dense M from its probes (`mass_probes`): M[i, j] = (M s_colour(j))[i] on the
        pattern."""
        return _spread(probes, self.mass_colours, self.mass_pattern, by_product=False)

    @property
    def assembled_by_product(self) -> bool:
        """Whether the dense C is assembled from the probes by a library product (large
        Jacobians); there reading C's entries from the probes instead pays
        (`jaxmbs.kinematics.compressed`)."""
        return self.n_colours * len(self.jacobian) * self.n > SMALL_PRODUCT

    def spread(self, probes: Array) -> Array:
        """The dense C from its probes (`probes`): each probe spread over its colour's
        columns, without a gather (XLA's CPU gather goes element by element): small
        Jacobians by one fused select per colour, large ones by the product probesᵀ seeds
        (a library call, cheaper than many selects)."""
        return _spread(
            probes, self.colours, self.jacobian_pattern, by_product=self.assembled_by_product
        )

    def compressed_jacobian(self, fn: Callable[[Array], Array], x: Array) -> Array:
        """Jacobian of `fn` at `x` (pattern `jacobian`) from `n_colours` Jacobian-vector
        products along the colour groups (`probes`), as a dense array."""
        return self.spread(self.probes(fn, x))


def _seeds(colours: tuple[int, ...], dtype) -> Array:
    """The colour groups s_k as rows, shape (number of colours, n)."""
    colours = np.asarray(colours, dtype=int)
    return jnp.asarray(colours[None, :] == np.arange(colours.max(initial=-1) + 1)[:, None], dtype)


def _spread(probes: Array, colours: tuple[int, ...], pattern: np.ndarray, by_product: bool):
    """The dense matrix with entries [i, j] = probes[colour(j), i] on the pattern, zero off
    it: by the product probesᵀ seeds, or by one fused select per colour."""
    if by_product:
        spread = probes.T @ _seeds(colours, probes.dtype)
    else:
        colours = np.asarray(colours, dtype=int)
        spread = sum(jnp.where(colours == k, probes[k][:, None], 0.0) for k in range(len(probes)))
    return jnp.where(pattern, spread, 0.0)


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
