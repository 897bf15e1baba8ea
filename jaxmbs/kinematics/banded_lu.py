"""The Newton iteration matrix of an implicit step as a banded LU: O(n) per iteration on
chains (`BandedAlgebra.newton_system`, used by `jaxmbs.GeneralizedAlpha`).

The iteration matrix of the index-3 generalized-α step (Arnold & Brüls 2007; eq 8 of
`jaxmbs.integrate.generalized_alpha`),

    S = [ M + β' K_t + γ' C_t   C_Iᵀ ]
        [ C_I + O(h)             0   ],

is not symmetric (K_t holds ∂(C_Iᵀλ)/∂q and the forces' −∂Q/∂q, C_t = −∂Q/∂q̇), and its
upper left block is not block-diagonal: a torsional spring-damper across a chain's joint
couples the neighbouring bodies. So the range-space factorisation of
`jaxmbs.kinematics.banded`, which eliminates q̈ through the Cholesky factors of M's diagonal
blocks, does not apply (H⁻¹ of a block-banded H is dense, and so would be C_I H⁻¹ C_Iᵀ).
S itself is banded, however, once its n + r unknowns (q̈ and λ_I together) are put in
reverse Cuthill–McKee order of its pattern (`jaxmbs.kinematics.structure.iteration_pattern`;
on a chain, each body's accelerations next to the multipliers of its joints: bandwidth 7
for a planar chain of any length). With bandwidth w, S is block-tridiagonal in blocks of w:

- **assembly**: S from as many Jacobian-vector products as the columns of its pattern have
  colours (Curtis–Powell–Reid grouping, `jaxmbs.kinematics.sparsity.greedy_colouring`: 7
  for the planar chain with spring-dampers, against n + r for the dense S);
- **factorisation**: Gaussian elimination with partial pivoting (the zero block of the
  multipliers needs row exchanges), one block column at a time: step k factorises the
  2w × w panel of block rows k and k + 1 (`jax.lax.linalg.lu`), which leaves U with two
  upper block diagonals, as LAPACK's banded LU (`gbtrf`, upper bandwidth kl + ku) does;
  a `lax.scan` over the nb = ⌈(n + r)/w⌉ block columns, O((n + r) w²) work;
- **solve**: forward and backward substitution, scanned likewise, O((n + r) w); linear in
  the right-hand side (gathers, no scatter), so reverse mode transposes it as it is.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from scipy import sparse
from scipy.sparse import csgraph

from .._internal.types import Array
from .sparsity import greedy_colouring


@dataclasses.dataclass(frozen=True, eq=False)
class LUPlan:
    """Static maps of the block-tridiagonal iteration matrix.

    **Fields:**

    - `size`: n + r, the unknowns (q̈, then λ on the independent rows).
    - `width`: w, the block size (the bandwidth in the plan's order).
    - `order`: (nb, w) the unknowns of each block, in reverse Cuthill–McKee order (`size`
      marks padding).
    - `position`: (size,) the place of each unknown in `order`, flattened.
    - `seeds`: (colours, size) the colour groups of S's columns.
    - `rows`, `colours`: (nb, w, 3w) for block row k and the block columns k − 1, k, k + 1,
      the row of S and the colour of the column of each entry (padding: `size`, and the
      colour count: a zero).
    """

    size: int
    width: int
    order: np.ndarray
    position: np.ndarray
    seeds: np.ndarray
    rows: np.ndarray
    colours: np.ndarray


@functools.lru_cache(maxsize=64)
def lu_plan(n: int, iteration: tuple[tuple[int, ...], ...], rows: tuple[int, ...]) -> LUPlan:
    """The plan of S on the independent constraint rows `rows`, unknowns x = (q̈, λ_rows),
    from the columns of each row of the pattern on all rows, `iteration`
    (`jaxmbs.kinematics.structure.iteration_pattern`; n coordinates)."""
    index = np.concatenate([np.arange(n), n + np.asarray(rows, dtype=int)])
    size = index.size
    full = np.zeros((len(iteration), len(iteration)), dtype=bool)
    for i, cols in enumerate(iteration):
        full[i, list(cols)] = True
    pattern = full[np.ix_(index, index)]
    graph = sparse.csr_array((pattern | pattern.T) & ~np.eye(size, dtype=bool))
    order = csgraph.reverse_cuthill_mckee(graph, symmetric_mode=True).astype(int)
    position = np.empty(size, dtype=int)
    position[order] = np.arange(size)
    i, j = np.nonzero(pattern)
    w = max(1, int(np.max(np.abs(position[i] - position[j]), initial=0)))
    nb = -(-size // w)
    blocks = np.full(nb * w, size)
    blocks[:size] = order
    blocks = blocks.reshape(nb, w)
    colour = greedy_colouring(pattern)
    n_colours = int(colour.max(initial=-1)) + 1
    # Entry (a, b) of block row k, block columns k − 1 .. k + 1: S[blocks[k, a], cols[k, b]].
    padded = np.concatenate([np.full((1, w), size), blocks, np.full((1, w), size)])
    cols = np.stack([padded[k : k + 3].reshape(-1) for k in range(nb)])  # (nb, 3w)
    row_of = np.broadcast_to(blocks[:, :, None], (nb, w, 3 * w))
    col_of = np.broadcast_to(cols[:, None, :], (nb, w, 3 * w))
    real = (row_of < size) & (col_of < size)
    present = np.zeros_like(real)
    present[real] = pattern[row_of[real], col_of[real]]
    colour_of = np.full((nb, w, 3 * w), n_colours)
    colour_of[present] = colour[col_of[present]]
    index_type = np.int32  # gathers must work without jax_enable_x64 as well
    return LUPlan(
        size=size,
        width=w,
        order=blocks.astype(index_type),
        position=position.astype(index_type),
        seeds=(colour[None, :] == np.arange(n_colours)[:, None]).astype(float),
        rows=np.where(present, row_of, size).astype(index_type),
        colours=colour_of.astype(index_type),
    )


class LUFactor(NamedTuple):
    """Per block column k: the row permutation of its panel (2w), the unit lower factors
    L11 (w × w) and L21 (w × w), and U's rows U11 (w × w) and U12 (w × 2w)."""

    permutation: Array
    L11: Array
    L21: Array
    U11: Array
    U12: Array


def block_rows(plan: LUPlan, probes: Array) -> Array:
    """S's block rows (nb + 1, w, 3w) from the probes S s_k (colours, size): row k holds
    the blocks of columns k − 1, k, k + 1; a last identity row pads the elimination."""
    nb, w = plan.order.shape
    S = jnp.pad(probes, ((0, 1), (0, 1)))[plan.colours, plan.rows]
    pad = np.zeros((nb + 1, w, 3 * w))
    pad[:, :, w : 2 * w] = np.eye(w)
    pad[:-1] *= (plan.order == plan.size)[:, :, None]  # identity on padding unknowns
    return jnp.concatenate([S, jnp.zeros((1, w, 3 * w), S.dtype)]) + jnp.asarray(pad, S.dtype)


def factor(plan: LUPlan, probes: Array) -> LUFactor:
    """LU with partial pivoting of S (module notes), from its probes S s_k."""
    w = plan.width
    S = block_rows(plan, probes)
    top = jnp.concatenate([S[0, :, w:], jnp.zeros((w, w), S.dtype)], axis=1)  # columns 0..2
    unit = jnp.eye(w, dtype=S.dtype)

    def step(top, below):
        window = jnp.concatenate([top, below])  # block rows k, k + 1; columns k .. k + 2
        lu, _, permutation = jax.lax.linalg.lu(window[:, :w])
        window = window[permutation]
        L11 = jnp.tril(lu[:w], -1) + unit
        U12 = jsl.solve_triangular(L11, window[:w, w:], lower=True, unit_diagonal=True)
        schur = window[w:, w:] - lu[w:] @ U12  # block row k + 1 on columns k + 1, k + 2
        top = jnp.concatenate([schur, jnp.zeros((w, w), S.dtype)], axis=1)
        return top, LUFactor(permutation, L11, lu[w:], jnp.triu(lu[:w]), U12)

    _, factors = jax.lax.scan(step, top, S[1:])
    return factors


def solve(plan: LUPlan, f: LUFactor, b: Array) -> Array:
    """S⁻¹b from the factors of `factor`."""
    nb, w = plan.order.shape
    b_blocks = jnp.concatenate([b, jnp.zeros((1,), b.dtype)])[plan.order]
    b_blocks = jnp.concatenate([b_blocks, jnp.zeros((1, w), b.dtype)])

    def forward(carry, step):
        (permutation, L11, L21, _, _), below = step
        v = jnp.concatenate([carry, below])[permutation]
        y = jsl.solve_triangular(L11, v[:w], lower=True, unit_diagonal=True)
        return v[w:] - L21 @ y, y

    _, y = jax.lax.scan(forward, b_blocks[0], (f, b_blocks[1:]))

    def backward(carry, step):
        (_, _, _, U11, U12), y_k = step
        x = jsl.solve_triangular(U11, y_k - U12 @ carry.reshape(-1), lower=False)
        return jnp.stack([x, carry[0]]), x

    _, x = jax.lax.scan(backward, jnp.zeros((2, w), b.dtype), (f, y), reverse=True)
    return x.reshape(-1)[plan.position]  # a gather: reverse mode transposes it


def newton_system(
    plan: LUPlan, residual: Callable[[Array], Array], x: Array
) -> tuple[Array, Callable[[Array], Array]]:
    """r(x) and b ↦ S⁻¹b for S = ∂r/∂x, assembled from one Jacobian-vector product per
    colour of its columns and factorised once."""
    r, linear = jax.linearize(residual, x)
    probes = jax.vmap(linear)(jnp.asarray(plan.seeds, x.dtype))
    factors = factor(plan, probes)
    return r, functools.partial(solve, plan, factors)
