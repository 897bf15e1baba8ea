"""The constraint Jacobian by its column colours, read entry by entry.

With the columns of C coloured so that no two columns of one colour share a row
(`jaxmbs.kinematics.sparsity.Sparsity`), one Jacobian-vector product per colour k gives the probe
p_k = C s_k (s_k: the indicator of colour k) and every structural non-zero is

    C[i, j] = p_colour(j)[i].

The `banded` formulation factorises from the entries of C on its band windows only; taking
them from the probes skips the dense (rows × n) matrix, whose assembly (a product of the
probes with the colour indicators, or a gather of all rows × n entries) dominated the
right-hand side of long chains (chain N = 50: 48 → 31 µs). For small Jacobians the dense
assembly is one fused kernel and cheaper than the gather (`Sparsity.assembled_by_product`
decides; under `vmap` the gather is batched too).
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._internal import linalg
from .._internal.types import Array
from .sparsity import Sparsity


class StoredJacobian(eqx.Module):
    """C in the form an algebra reads it (`jaxmbs.kinematics.algebra`): entries at static
    indices (`take`) and the dense matrix (`dense`), whichever way C is stored."""

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, int]:
        """(rows, n)."""

    @property
    @abc.abstractmethod
    def dtype(self):
        """The entries' dtype."""

    @abc.abstractmethod
    def take(self, rows: np.ndarray, columns: np.ndarray) -> Array:
        """C[rows, columns] for static index arrays (broadcast together); indices out of range
        (padding) read zero."""

    @abc.abstractmethod
    def dense(self) -> Array:
        """C as a dense (rows, n) array."""


class DenseJacobian(StoredJacobian):
    """C stored as the dense matrix itself."""

    matrix: Array

    @property
    def shape(self) -> tuple[int, int]:
        return self.matrix.shape

    @property
    def dtype(self):
        return self.matrix.dtype

    def take(self, rows: np.ndarray, columns: np.ndarray) -> Array:
        return linalg.take(self.matrix, rows, columns)

    def dense(self) -> Array:
        return self.matrix


def stored(C: Array | StoredJacobian) -> StoredJacobian:
    """C as a `StoredJacobian`: a dense array wrapped, a stored one as it is (a caller may
    hand a formulation either)."""
    return C if isinstance(C, StoredJacobian) else DenseJacobian(jnp.asarray(C))


class CompressedJacobian(StoredJacobian):
    """C as its probes, shape (colours, rows), and the static sparsity pattern."""

    probes: Array
    sparsity: Sparsity = eqx.field(static=True)

    @property
    def shape(self) -> tuple[int, int]:
        return self.probes.shape[1], self.sparsity.n

    @property
    def dtype(self):
        return self.probes.dtype

    def take(self, rows: np.ndarray, columns: np.ndarray) -> Array:
        """Entries outside the pattern read zero."""
        rows, columns = np.broadcast_arrays(np.asarray(rows), np.asarray(columns))
        k, n = self.shape
        valid = (rows >= 0) & (rows < k) & (columns >= 0) & (columns < n)
        r, c = np.where(valid, rows, 0), np.where(valid, columns, 0)
        keep = valid & self.sparsity.jacobian_pattern[r, c]
        colour = np.where(keep, np.asarray(self.sparsity.colours)[c], self.probes.shape[0])
        return linalg.take(self.probes, colour, r)

    def dense(self) -> Array:
        """`Sparsity.spread`: no gather, so that reverse mode transposes it without a
        scatter."""
        return self.sparsity.spread(self.probes)
