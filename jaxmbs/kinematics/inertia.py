"""The mass matrix M(q) as the engine evaluates it: on its sparsity pattern where that pays.

M(q) q̈ + Cᵀλ = Q (Pękal–Frączek 2016, eq 2.1). For a mechanism built from its kinetic
energy (`Mechanism.from_lagrangian`), M = ∂²T/∂q̇², and the dense Hessian is n
Hessian-vector products M eⱼ. Columns of M that never share a row can share one product
(Curtis–Powell–Reid grouping, as for the constraint Jacobian in `jaxmbs.kinematics.sparsity`): with
the colour groups s_k of M's static pattern, M[i, j] = (M s_colour(j))[i] on the pattern.
Spatial bodies in Euler angles have a diagonal translational part and a 3×3 rotational block
each, so 3 products give M for any number of bodies (McPherson strut, n = 30: 10× less
work; a vmapped batch of the dense Hessian also ran through slow library reductions).
"""

from __future__ import annotations

from .._internal.types import Array, Coordinates, Model, Params
from .algebra import algebra_of


def mass_matrix(mechanism: Model, q: Coordinates, params: Params) -> Array:
    """M(q), shape (n, n), by the mechanism's algebra (`AbstractAlgebra.mass_matrix`): from
    `mechanism.mass_product` along the colour groups of M's pattern when the mechanism has a
    product, a known sparsity, and fewer groups than n; else `mechanism.mass_matrix`."""
    return algebra_of(mechanism).mass_matrix(mechanism, q, params)
