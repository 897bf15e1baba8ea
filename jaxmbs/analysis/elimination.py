"""Redundant-constraint elimination by explicit choice (Wojtyra–Frączek 2013, §3.1, §4.4).

With redundancy p the equations of motion can be closed by deleting p chosen rows of
C q̈ = Γ (and of Cᵀλ) so that the remaining r rows are independent. The motion does not
depend on the choice; the multipliers of the deleted rows are zero by construction, which
shifts their load onto the rows that stay. So the reactions of the groups that are not
uniquely solvable (see `jaxmbs.analyze_solvability`) change with the choice, while the
unique ones and the generalized reaction Cᵀλ do not. This is a formulation: pass it as
`simulate(..., method=eliminate_rows(mechanism, drop, q0))`.

The kept rows are data, not static structure, so several elimination variants of one
mechanism share a single compilation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import jax.numpy as jnp
import numpy as np

from .._internal.types import Array
from ..formulations import AbstractFormulation, get_formulation
from ..kinematics.constraints import constraint_jacobian
from ..kinematics.structure import RANK_RTOL

if TYPE_CHECKING:
    from ..model import Mechanism


class RowElimination(AbstractFormulation):
    """A formulation that keeps only the rows `keep` of [Φ ; ψ] (the others are eliminated).

    **Arguments:**

    - `keep`: the r = rank C rows kept (independent); build it with
      [`jaxmbs.eliminate_rows`][], which checks them.
    - `base`: the formulation solving the reduced, independent system (default "qr").

    Multipliers: the base formulation's λ on the kept rows, zero on the eliminated ones.
    """

    name: ClassVar[str] = "elimination"
    keep: Array
    base: AbstractFormulation

    def __init__(self, keep: Sequence[int] | Array, base: str | AbstractFormulation = "qr"):
        keep_np = np.asarray(keep)
        if keep_np.ndim != 1 or len(set(keep_np.tolist())) != keep_np.size or np.any(keep_np < 0):
            raise ValueError(f"keep must be distinct non-negative row indices, got {keep!r}")
        self.keep = jnp.asarray(np.sort(keep_np))
        self.base = get_formulation(base)

    def _reduced(self, C, gamma, mechanism: Mechanism):
        structure = mechanism.structure
        r = structure.rank
        if self.keep.shape != (r,):
            raise ValueError(
                f"RowElimination keeps {self.keep.shape[0]} rows but rank C = {r}: keep "
                f"exactly r rows (drop the redundancy p = {structure.redundancy})"
            )
        reduced = dataclasses.replace(
            structure,
            n_holonomic=r,
            n_pfaffian=0,
            rank_holonomic=r,
            independent_rows=tuple(range(r)),
            independent_holonomic_rows=tuple(range(r)),
        )
        return C[self.keep], gamma[self.keep], mechanism.replace_structure(reduced)

    def accelerations(self, M, Q, C, gamma, mechanism):
        return self.base.accelerations(M, Q, *self._reduced(C, gamma, mechanism))

    def multipliers(self, M, Q, C, gamma, mechanism):
        qdd, lam_kept = self.base.multipliers(M, Q, *self._reduced(C, gamma, mechanism))
        return qdd, jnp.zeros(C.shape[0], lam_kept.dtype).at[self.keep].set(lam_kept)


def eliminate_rows(
    mechanism: Mechanism,
    drop: Sequence[int],
    q,
    t: float = 0.0,
    *,
    base: str | AbstractFormulation = "qr",
) -> RowElimination:
    """The [`jaxmbs.RowElimination`][] that deletes the rows `drop` of [Φ ; ψ].

    Checks, at the concrete configuration `q`, that exactly p = redundancy rows are dropped
    and that the remaining ones are independent (rank C unchanged); raises `ValueError`
    otherwise.
    """
    structure = mechanism.structure or mechanism.with_structure(q, t).structure
    rows = structure.n_constraints
    drop_set = {int(i) for i in drop}
    if len(drop_set) != len(drop) or not all(0 <= i < rows for i in drop_set):
        raise ValueError(f"drop must be distinct rows in [0, {rows}), got {list(drop)}")
    if len(drop_set) != structure.redundancy:
        raise ValueError(
            f"drop {len(drop_set)} rows, but the redundancy is p = {structure.redundancy}: "
            "eliminate exactly p rows"
        )
    keep = [i for i in range(rows) if i not in drop_set]
    C = np.asarray(constraint_jacobian(mechanism, jnp.asarray(q), t, mechanism.params))
    sv = np.linalg.svd(C[keep], compute_uv=False)
    tol = RANK_RTOL * max(1.0, float(np.max(np.abs(C))))
    if int(np.sum(sv > tol)) != structure.rank:
        raise ValueError(
            f"the rows left after dropping {sorted(drop_set)} are dependent (rank "
            f"{int(np.sum(sv > tol))} < rank C = {structure.rank}): the motion would change; "
            "choose rows from the redundant ones (see jaxmbs.analyze_solvability)"
        )
    return RowElimination(keep, base)
