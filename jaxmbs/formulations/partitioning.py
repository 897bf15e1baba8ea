"""Coordinate partitioning with a partition fixed outside jit (Pękal–Frączek 2016,
eqs 3.37–3.39). Partitions that switch along the motion (the projective criterion) are
`jaxmbs.simulate_partitioned`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .base import AbstractFactorizedFormulation

if TYPE_CHECKING:
    from ..model import Mechanism


class CoordinatePartitioning(AbstractFactorizedFormulation):
    """Coordinate partitioning (Pękal–Frączek 2016, eqs 3.37–3.39).

    Coordinates split into r dependent u and s independent v, C_I = [Φ_u Φ_v] on the static
    independent rows (redundant rows dropped). With B = Φ_u⁻¹Φ_v and a = Φ_u⁻¹Γ_I (one LU
    factorisation of Φ_u):

        M̌ = M^vv − M^vu B − Bᵀ(M^uv − M^uu B),    Q̌ = Q^v − M^vu a − Bᵀ(Q^u − M^uu a),
        v̈ = M̌⁻¹ Q̌,    ü = a − B v̈,    λ_I = Φ_u⁻ᵀ (Q^u − M^uv v̈ − M^uu ü)    (3.38–3.39).

    All coordinates are integrated. The partition is fixed outside jit — by default
    `Structure.dependent_coordinates`, chosen by column pivoting at the mechanism's
    reference configuration — and checked along the motion: `simulate` stops with
    `RESULTS.singular_configuration` when Φ_u (columns scaled to unit norm) has a reciprocal
    condition number below `min_condition` or passes through singularity.

    **Arguments:**

    - `dependent`: the r dependent coordinates (indices); `None`: the structure's choice.
    - `min_condition`: smallest accepted reciprocal condition number of Φ_u (default √ε of
      the dtype: at most half the digits are lost).
    """

    name: ClassVar[str] = "partitioning"
    dependent: tuple[int, ...] | None = eqx.field(default=None, static=True)
    min_condition: float | None = eqx.field(default=None, static=True)

    def partition(self, mechanism: Mechanism) -> tuple[np.ndarray, np.ndarray]:
        """Index arrays of the dependent (u) and independent (v) coordinates."""
        structure = mechanism.structure
        u = structure.dependent_coordinates if self.dependent is None else self.dependent
        u = tuple(sorted(int(i) for i in u))
        if (
            len(u) != structure.rank
            or len(set(u)) != len(u)
            or not set(u) <= set(range(structure.n))
        ):
            raise ValueError(
                f"coordinate partitioning needs {structure.rank} distinct dependent coordinates "
                f"out of {structure.n} (the rank of C), got {u}"
            )
        v = tuple(i for i in range(structure.n) if i not in set(u))
        return np.asarray(u, dtype=int), np.asarray(v, dtype=int)

    def factor(self, M, C, mechanism):
        structure = mechanism.structure
        u, v = self.partition(mechanism)
        C_i = structure.independent_part(C)
        lu = jsl.lu_factor(C_i[:, u])
        B = jsl.lu_solve(lu, C_i[:, v])
        M_uu, M_uv, M_vu = M[np.ix_(u, u)], M[np.ix_(u, v)], M[np.ix_(v, u)]
        M_reduced = M[np.ix_(v, v)] - M_vu @ B - B.T @ (M_uv - M_uu @ B)
        reduced = jsl.cho_factor(M_reduced, lower=True) if structure.dof else None
        return lu, B, M_uu, M_vu, reduced

    def solve(self, factors, Q, gamma, mechanism):
        structure = mechanism.structure
        u, v = self.partition(mechanism)
        lu, B, M_uu, M_vu, reduced = factors
        a = jsl.lu_solve(lu, structure.independent_part(gamma))
        qdd = jnp.zeros_like(Q)
        if structure.dof == 0:
            return qdd.at[u].set(a, unique_indices=True)
        vdd = jsl.cho_solve(reduced, Q[v] - M_vu @ a - B.T @ (Q[u] - M_uu @ a))
        return qdd.at[u].set(a - B @ vdd, unique_indices=True).at[v].set(vdd, unique_indices=True)

    def multipliers(self, M, Q, C, gamma, mechanism):
        structure = mechanism.structure
        u, _ = self.partition(mechanism)
        qdd = self.accelerations(M, Q, C, gamma, mechanism)
        C_i = structure.independent_part(C)
        lam_ind = jsl.lu_solve(jsl.lu_factor(C_i[:, u]), (Q - M @ qdd)[u], trans=1)
        return qdd, structure.expand_multipliers(C, lam_ind)

    def pivot_condition(self, C, mechanism):
        structure = mechanism.structure
        u, _ = self.partition(mechanism)
        C_i = structure.independent_part(C)
        block = C_i[:, u]
        block = block / jnp.linalg.norm(block, axis=0)
        sigma = jnp.linalg.svd(block, compute_uv=False)
        indicator = jnp.linalg.slogdet(block)[0] * sigma[-1] / sigma[0]
        threshold = self.min_condition
        if threshold is None:
            threshold = float(np.sqrt(np.finfo(block.dtype).eps))
        return indicator, jnp.abs(indicator) < threshold
