"""Structural sparsity of C and M and compressed Jacobians.

Joints couple few bodies, so the constraint Jacobian C (Wojtyra–Frączek 2013, eqs 1–9) has a
handful of non-zeros per row and, for planar and spatial bodies, M is (block-)diagonal. Both
patterns are properties of the model, not of the state: they are detected once, outside jit,
next to the rank analysis of [`jaxmbs.Structure`][], and used as static data:

- **Compressed Jacobian.** Columns of C that never share a row are structurally orthogonal and
  can be probed by one Jacobian-vector product (Curtis–Powell–Reid column grouping): a greedy
  colouring of the column intersection graph needs 4 products for a planar chain of any
  length instead of n. The same grouping of M's columns gives M from a few products M s_k
  (Hessian-vector products of the kinetic energy, `jaxmbs.kinematics.algebra`): 3 for
  spatial bodies in Euler angles instead of n.
The band plan of C M⁻¹Cᵀ built on these patterns is in `jaxmbs.kinematics.banded`.

Patterns are detected numerically at a few random states around the reference configuration,
with randomly perturbed parameters, so an entry that is zero only at particular parameter
values (a joint at a body's centre of mass) is still counted as a structural non-zero.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.linalg import SMALL_PRODUCT
from .._internal.types import Array

#: Number of random states at which the patterns are sampled.
SAMPLES = 3


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
class Reference:
    """The concrete state a pattern was detected near, kept (hashable) for the patterns
    detected later, on demand (`jaxmbs.kinematics.structure.iteration_pattern`).

    **Fields:** `t`, `q`, and the parameters as their tree structure `treedef` and, per leaf,
    its shape and values.
    """

    t: float
    q: tuple[float, ...]
    treedef: jax.tree_util.PyTreeDef
    leaves: tuple[tuple[tuple[int, ...], tuple[float, ...]], ...]

    @classmethod
    def of(cls, q, t: float, params) -> Reference:
        leaves, treedef = jax.tree_util.tree_flatten(params)
        arrays = [np.asarray(x, dtype=float) for x in leaves]
        kept = tuple((x.shape, tuple(float(v) for v in x.reshape(-1))) for x in arrays)
        return cls(float(t), tuple(float(v) for v in np.asarray(q).reshape(-1)), treedef, kept)

    @property
    def params(self):
        """The parameters, as NumPy arrays."""
        leaves = [np.asarray(values).reshape(shape) for shape, values in self.leaves]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


@dataclasses.dataclass(frozen=True)
class Sparsity:
    """Structural non-zeros of the constraint Jacobian C and of the mass matrix M.

    **Fields:**

    - `n`: number of coordinates.
    - `jacobian`: for each row of C = [Φ_q ; A], the columns that can be non-zero.
    - `mass`: for each row of M, the columns that can be non-zero (the diagonal always).
    - `colours`: a colour per column of C; columns of one colour never share a row.
    - `mass_colours`: the same for the columns of M.
    - `reference`: the state the patterns were detected near (None: not kept); not compared:
      patterns detected at two states are the same static data for jit.
    """

    n: int
    jacobian: tuple[tuple[int, ...], ...]
    mass: tuple[tuple[int, ...], ...]
    colours: tuple[int, ...]
    mass_colours: tuple[int, ...]
    reference: Reference | None = dataclasses.field(default=None, compare=False)

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
