"""Which constraint reactions are unique: solvability analysis (Wojtyra–Frączek 2013, §3).

With redundant constraints (rank C = r < m + h) the multipliers λ are not unique: any
λ + N d with Cᵀ N = 0 gives the same motion and the same generalized reaction Cᵀλ. The
share f_X = C_Xᵀλ_X of a constraint group X is nevertheless unique when the row space of
C is the direct sum of the row spaces of C_X and of the remaining rows C_Y (§3.2). Two
numerical tests of that condition, holonomic and Pfaffian rows alike:

- QR criterion (eqs 21–27): C E = Q R with column pivoting; the last p = m + h − r columns
  of Q span the left null space of C; with Q̃_X their rows of group X,
  B_X = C_Xᵀ Q̃_X (n × p) vanishes exactly when f_X is unique.
- rank criterion (direct sum): rank C_X + rank C_Y = rank C.

The analysis runs in NumPy on concrete data, outside jit, like `jaxmbs.analyze_structure`;
`reaction_variations` and `unique_groups` are the QR criterion in JAX, per state under jit
(the `determined` flags of the spatial joints' reactions and of their components,
`jaxmbs.Reactions`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from .._internal.compile import quick_jit
from ..kinematics.constraints import constraint_jacobian
from ..kinematics.structure import RANK_RTOL, Structure, pivoted_row_selection

if TYPE_CHECKING:
    from ..model import Mechanism


@dataclasses.dataclass(frozen=True, eq=False)
class GroupSolvability:
    """Solvability of one constraint group's reaction.

    **Fields:**

    - `name`, `rows`: the group and its rows of [Φ ; ψ].
    - `kind`: "holonomic", "pfaffian" or "mixed".
    - `rank`: rank C_X.
    - `B`: B_X = C_Xᵀ Q̃_X, shape (n, p) (QR criterion, eq 27).
    - `unique`: B_X = 0 (to the tolerance): the reaction f_X is unique.
    - `unique_by_rank`: rank C_X + rank C_Y = rank C (the direct-sum cross-check).
    """

    name: str
    rows: tuple[int, ...]
    kind: str
    rank: int
    B: np.ndarray
    unique: bool
    unique_by_rank: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class Solvability(Structure):
    """Constraint structure and reaction solvability at one configuration.

    A [`jaxmbs.Structure`][] (n, m, h, rank r, rank Φ_q, independent rows, and the
    properties `redundancy` p = m + h − r, `dof` = n − r and `dependent_rows`: one choice
    of p rows whose elimination leaves an independent set) plus:

    **Fields:**

    - `rank_pfaffian`: rank of the Pfaffian block alone.
    - `groups`: per-group [`jaxmbs.GroupSolvability`][], in the mechanism's order.
    - `coordinate_names`: for printing B_X.
    """

    rank_pfaffian: int
    groups: tuple[GroupSolvability, ...]
    coordinate_names: tuple[str, ...]

    @property
    def solvable(self) -> dict[str, bool]:
        """Group name → whether its reaction is unique (QR criterion)."""
        return {g.name: g.unique for g in self.groups}

    @property
    def consistent(self) -> bool:
        """Whether the QR and rank criteria agree for every group."""
        return all(g.unique == g.unique_by_rank for g in self.groups)

    def group(self, name: str) -> GroupSolvability:
        """The result of one group, by name."""
        for g in self.groups:
            if g.name == name:
                return g
        raise KeyError(f"no constraint group {name!r}; groups: {[g.name for g in self.groups]}")

    def table(self) -> str:
        """The per-group verdicts as a markdown table."""
        lines = [
            "| group | kind | rows | rank C_X | max abs B_X | unique (QR) | unique (rank) |",
            "|---|---|---|---|---|---|---|",
        ]
        for g in self.groups:
            b = float(np.max(np.abs(g.B), initial=0.0))
            rows = ",".join(str(r) for r in g.rows)
            lines.append(
                f"| {g.name} | {g.kind} | {rows} | {g.rank} | {b:.3g} | "
                f"{'yes' if g.unique else 'no'} | {'yes' if g.unique_by_rank else 'no'} |"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        head = (
            f"coordinates n = {self.n}, holonomic m = {self.n_holonomic}, "
            f"Pfaffian h = {self.n_pfaffian}\n"
            f"rank Φ_q = {self.rank_holonomic}, rank of the Pfaffian block = "
            f"{self.rank_pfaffian}, rank C = {self.rank}\n"
            f"redundancy p = {self.redundancy}, degrees of freedom (velocities) = {self.dof}\n"
        )
        if self.redundancy:
            head += f"dependent rows (one choice) = {list(self.dependent_rows)}\n"
        unique = [g.name for g in self.groups if g.unique]
        other = [g.name for g in self.groups if not g.unique]
        head += f"unique reactions: {', '.join(unique) or '-'}\n"
        head += f"non-unique reactions: {', '.join(other) or '-'}\n"
        if not self.consistent:
            head += "WARNING: the QR and rank criteria disagree (near-singular configuration)\n"
        return head + "\n" + self.table()


def _rank(A: np.ndarray, tol: float) -> int:
    if A.size == 0:
        return 0
    return int(np.sum(np.linalg.svd(A, compute_uv=False) > tol))


def group_solvability(
    C: np.ndarray,
    groups: tuple[tuple[str, tuple[int, ...]], ...],
    n_holonomic: int,
    rtol: float = RANK_RTOL,
) -> tuple[int, list[GroupSolvability]]:
    """QR and rank criteria for every group of the constraint matrix C (eqs 21–27).

    **Returns:** rank C and the per-group results. Raises `ValueError` when pivoted QR and
    SVD disagree on the rank (a configuration too close to a singular one).
    """
    C = np.asarray(C, dtype=np.float64)
    tol = rtol * max(1.0, float(np.max(np.abs(C), initial=0.0)))
    Q, R, _ = scipy.linalg.qr(C, pivoting=True)  # C[:, perm] = Q R, |R_kk| non-increasing
    rank = int(np.sum(np.abs(np.diag(R)) > tol))
    if rank != _rank(C, tol):
        raise ValueError(
            f"rank of C is ill-determined at this configuration (pivoted QR: {rank}, SVD: "
            f"{_rank(C, tol)}); analyse a generic, non-singular configuration"
        )
    null = Q[:, rank:]  # Q̃: the left null space of C, (m + h) × p
    out = []
    for name, rows in groups:
        idx = np.asarray(rows, dtype=int)
        other = np.setdiff1d(np.arange(C.shape[0]), idx)
        B = C[idx].T @ null[idx]
        rank_x = _rank(C[idx], tol)
        holonomic = idx < n_holonomic
        kind = "holonomic" if holonomic.all() else "pfaffian" if not holonomic.any() else "mixed"
        out.append(
            GroupSolvability(
                name=name,
                rows=tuple(int(r) for r in rows),
                kind=kind,
                rank=rank_x,
                B=B,
                unique=bool(np.max(np.abs(B), initial=0.0) <= tol),
                unique_by_rank=rank_x + _rank(C[other], tol) == rank,
            )
        )
    return rank, out


def _rank_rtol(dtype) -> float:
    """`RANK_RTOL`, widened in float32, whose round-off of C is ~1e-7."""
    return max(RANK_RTOL, 1000 * float(jnp.finfo(dtype).eps))


def reaction_variations(
    C, groups: tuple[tuple[str, tuple[int, ...]], ...]
) -> tuple[dict[str, jax.Array], jax.Array]:
    """The QR criterion's matrices in JAX at one configuration, for use under jit: group
    name → B_X = C_Xᵀ Q̃_X, shape (n, m + h), and the tolerance of `analyze_solvability`,
    tol = rtol · max(1, max |C|).

    Q̃ spans the left null space of C: here the columns of U of C = U S Vᵀ (full SVD) whose
    singular values are ≤ tol, and those beyond n; the others are zero columns (a static
    shape). λ + Q̃ d gives the same motion for every d, and moves f_X by B_X d: the columns
    of B_X span the variations of the group's reaction. No derivative flows through them.
    """
    C = jax.lax.stop_gradient(C)
    tol = _rank_rtol(C.dtype) * jnp.maximum(1.0, jnp.max(jnp.abs(C)))
    U, s, _ = jnp.linalg.svd(C, full_matrices=True)
    kept = jnp.zeros(C.shape[0], bool).at[: s.size].set(s > tol)
    null = jnp.where(kept, 0.0, U)
    variations = {}
    for name, rows in groups:
        idx = np.asarray(rows, dtype=int)
        variations[name] = C[idx].T @ null[idx]
    return variations, tol


def unique_groups(variations: dict[str, jax.Array], tol: jax.Array) -> dict[str, jax.Array]:
    """The QR criterion (eq 27) in JAX: group name → whether B_X (`reaction_variations`)
    vanishes, max |B_X| ≤ tol.

    Whether B_X = 0 does not depend on the basis Q̃ (another orthonormal one multiplies B_X
    by an orthogonal factor); max |B_X| may differ from `analyze_solvability`'s by a factor
    up to √p, so the two agree except within that factor of the tolerance. A verdict: no derivative
    flows through it.
    """
    return {name: jnp.max(jnp.abs(B)) <= tol for name, B in variations.items()}


_jacobian = quick_jit(constraint_jacobian)


def analyze_solvability(mechanism: Mechanism, q, t: float = 0.0, params=None) -> Solvability:
    """Rank, redundancy and reaction solvability of a mechanism at a concrete configuration.

    **Arguments:**

    - `mechanism`: the mechanism (its constraint groups are the units of the verdict).
    - `q`: a concrete configuration, shape (n,).
    - `t`: time (rheonomic constraints).
    - `params`: parameters (default: the mechanism's).

    **Returns:** an [`jaxmbs.Solvability`][]; `print(report)` shows the table,
    `report.solvable` maps each group to whether its reaction is unique.
    """
    params = mechanism.params if params is None else params
    q = np.asarray(q, dtype=float)
    if q.shape != (mechanism.n,) or not np.all(np.isfinite(q)):
        raise ValueError(
            f"analyze_solvability needs a finite configuration of shape ({mechanism.n},)"
        )
    # Arrays, not Python floats: one compilation serves every configuration and time.
    q, t = jnp.asarray(q), jnp.asarray(t, dtype=jnp.result_type(float))
    C = _jacobian(mechanism, q, t, jax.tree_util.tree_map(jnp.asarray, params))
    rtol = _rank_rtol(C.dtype)
    C = np.asarray(C, dtype=np.float64)
    m = mechanism.n_holonomic
    rank, groups = group_solvability(C, mechanism.constraint_groups, m, rtol)
    tol = rtol * max(1.0, float(np.max(np.abs(C), initial=0.0)))
    hol, basis, piv_h = pivoted_row_selection(C[:m], tol=tol)
    pf, _, piv_p = pivoted_row_selection(C[m:], basis=basis, tol=tol)
    pivots = piv_h + piv_p
    if len(pivots) != rank:
        raise ValueError(
            f"rank of C is ill-determined at this configuration (pivoted QR: {rank}, row "
            f"pivoting: {len(pivots)}); analyse a generic, non-singular configuration"
        )
    return Solvability(
        n=mechanism.n,
        n_holonomic=m,
        n_pfaffian=mechanism.n_pfaffian,
        rank=rank,
        rank_holonomic=len(hol),
        independent_rows=tuple(sorted(hol) + sorted(m + i for i in pf)),
        independent_holonomic_rows=tuple(sorted(hol)),
        smallest_pivot=min(pivots) / max(pivots) if pivots else 1.0,
        rank_pfaffian=_rank(C[m:], tol),
        groups=tuple(groups),
        coordinate_names=mechanism.coordinate_names,
    )
