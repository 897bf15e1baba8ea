"""Coordinate partitioning in the compact form, with switching (Blajer, Schiehlen, Schirm 1994).

**Compact partitioned equations (§2).** With q = [q_I; q_D], C_D nonsingular and C q̈ = Γ,

    q̇_D = A q̇_I + η,   A = −C_D⁻¹C_I,   η = −C_D⁻¹ b       (eq 7, with c = C q̇ + b)
    q̈_D = A q̈_I + ξ,   ξ = C_D⁻¹ Γ                         (eq 8)
    Dᵀ = [I; A] (eq 9),   M_d v̇_I = h_d,   M_d = DMDᵀ,   h_d = D(Q − M[0; ξ])   (eqs 12–14)

integrated for (q, v_I) together (k + n equations, eq 28 discussion): all of q is integrated, so
no nonlinear solve for q_D is needed, and q̇ = Dᵀv_I + [0; η] satisfies the velocity
constraints by construction; only Φ drifts, which projection removes.

**Switching during integration.** The partition is a permutation stored in the ODE state;
after each step the criterion of the current set is compared with the best set's and the
same (q, q̇) is re-expressed in the new independent velocities (see `jaxmbs.integrate.switching`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .._internal.checks import coordinate_indices
from .._internal.types import Array, Coordinates, Params
from ..kinematics import algebra
from ..kinematics.constraints import (
    constraint_jacobian,
    residuals_and_gamma,
    velocity_residual,
)
from ..kinematics.criteria import (
    independent_jacobian,
    permutation,
    pivoted_choice,
    set_criterion,
    tangent_rows,
)
from .stabilization import AbstractStabilization
from .state_space import AbstractStateFunction, read_off
from .switching import (
    AbstractSwitchingStateSpace,
    Switching,
    SwitchingSolver,
    get_switching,
    multipliers_from_accelerations,
)

if TYPE_CHECKING:
    from ..model import Mechanism

# ----------------------------------------------------------- compact partitioned equations


def _velocities(mechanism: Mechanism, q, v, t, perm, params):
    """q̇ = Dᵀv_I + [0; η] (eqs 7, 9), with Dᵀ and the LU factors of C_D for reuse."""
    structure = mechanism.structure
    k, n = structure.dof, mechanism.n
    rows = jnp.asarray(structure.independent_rows)
    ind, dep = perm[:k], perm[k:]
    C = constraint_jacobian(mechanism, q, t, params)[rows]
    b = velocity_residual(mechanism, q, jnp.zeros_like(q), t, params)[rows]
    lu = jsl.lu_factor(C[:, dep])
    A = -jsl.lu_solve(lu, C[:, ind])
    eta = -jsl.lu_solve(lu, b)
    Dt = jnp.zeros((n, k), q.dtype).at[ind].set(jnp.eye(k, dtype=q.dtype)).at[dep].set(A)
    return Dt @ v + jnp.zeros_like(q).at[dep].set(eta), Dt, lu


def compact_equations(
    mechanism: Mechanism,
    stabilization: AbstractStabilization,
    t,
    q: Coordinates,
    v: Array,
    perm: Array,
    params: Params,
) -> tuple[Array, Array, Array]:
    """q̇, v̇_I and q̈ of the compact partitioned equations (Blajer et al. 1994, eqs 7–14).

    `perm` lists the independent coordinates first (k of them), then the dependent ones;
    `v` are the independent velocities v_I = q̇_I. One LU factorisation of C_D gives A, η, ξ.
    """
    structure = mechanism.structure
    qd, Dt, lu = _velocities(mechanism, q, v, t, perm, params)
    dep = perm[structure.dof :]
    phi, c, gamma = residuals_and_gamma(mechanism, q, qd, t, params)
    gamma = stabilization.stabilized_gamma(gamma, c, phi)
    gamma = gamma[jnp.asarray(structure.independent_rows)]
    xi = jnp.zeros_like(q).at[dep].set(jsl.lu_solve(lu, gamma))  # [0; ξ], eq 10
    M = algebra.mass_matrix(mechanism, q, params)
    Q = mechanism.forces(t, q, qd, params)
    Md = Dt.T @ M @ Dt  # eq 13
    hd = Dt.T @ (Q - M @ xi)  # eq 14
    vd = jsl.cho_solve(jsl.cho_factor(Md, lower=True), hd)  # eq 12
    return qd, vd, Dt @ vd + xi


def _as_perm(perm_f: Array) -> Array:
    return jnp.round(perm_f).astype(jnp.int32)


class _CompactField(AbstractStateFunction):
    """(q, v_I, partition) ↦ (q̇, v̇_I, 0) for diffrax (eq 28 with all of q integrated)."""

    stabilization: AbstractStabilization

    def evaluate(self, y, t, params, valid):
        q, v, perm_f = y
        qd, vd, _ = compact_equations(
            self.mechanism, self.stabilization, t, q, v, _as_perm(perm_f), params
        )
        return jnp.where(valid, qd, 0.0), jnp.where(valid, vd, 0.0), jnp.zeros_like(perm_f)


def _criteria(mechanism, q, t, perm, params):
    """κ of the current set, the best set's permutation and κ, the rank pivots of C."""
    structure = mechanism.structure
    k = structure.dof
    q, params = jax.lax.stop_gradient((q, params))
    M = algebra.mass_matrix(mechanism, q, params)
    C = independent_jacobian(mechanism, q, t, params)
    W = tangent_rows(M, C)
    best = permutation(pivoted_choice(W))
    pivots = jnp.abs(jnp.diag(jnp.linalg.qr(C.T)[1]))
    return set_criterion(W, perm[:k]), best, set_criterion(W, best[:k]), pivots


class _Repartition(AbstractStateFunction):
    """After a step: switch to the best partition when `Switching` says so (same q, q̇)."""

    switching: Switching

    def evaluate(self, y, t, params, valid):
        q, v, perm_f = y
        perm = _as_perm(perm_f)
        current, best, best_value, _ = _criteria(self.mechanism, q, t, perm, params)
        switched = valid & self.switching.decide(current, best_value, jnp.any(best != perm))
        qd = _velocities(self.mechanism, q, v, t, perm, params)[0]
        v_new = qd[best[: self.structure.dof]]
        y = (
            q,
            jnp.where(switched, v_new, v),
            jnp.where(switched, best.astype(perm_f.dtype), perm_f),
        )
        return y, switched


class _PositionProjector(AbstractStateFunction):
    """The stabilisation's projection of q onto Φ = 0
    (`AbstractStabilization.project_positions`); v_I needs none (q̇ = Dᵀv_I + η is
    consistent by construction), and whether it holds (`AbstractStabilization.holds`)."""

    stabilization: AbstractStabilization

    def evaluate(self, y, t, params, valid):
        q, v, perm_f = y
        projected = self.stabilization.project_positions(self.mechanism, q, t, params)
        holds = self.stabilization.holds(self.mechanism, projected, t, params)
        return (jnp.where(valid, projected, q), v, perm_f), holds | ~valid


#: `simulate(method=PARTITIONED)`: coordinate partitioning with switching (the fixed partition
#: is the formulation `"partitioning"`).
PARTITIONED = "partitioned"


class PartitionedCoordinates(AbstractSwitchingStateSpace):
    """Coordinate partitioning in the compact form, re-partitioning along the motion
    (`method="partitioned"`).

    The state is (q, v_I) plus the partition (Blajer et al. 1994, eqs 7–14 and the eq 28
    discussion); the partition starts from `independent` or from the projective criterion at
    q0, and switches after any step where the current set's criterion falls below
    `switching.threshold` or another set is `switching.ratio` times better. The physical
    state (q, q̇) is continuous across a switch (`jaxmbs.integrate.switching`). Velocities
    satisfy the constraints by construction (q̇ = Dᵀv_I + [0; η]); the stabilisation acts on
    positions only (projection: Newton on Φ after each step; Baumgarte: Γ̄).

    **Arguments:**

    - `independent`: initial independent coordinates (indices or names, k = n − r of them);
      default: the best by the projective criterion at q0.
    - `switching`: `True`, `False` (keep the initial partition; stop with
      `RESULTS.singular_configuration` when it becomes singular) or a `jaxmbs.Switching`.

    `Solution.stats` also hold `num_switches` and `independent` (the independent coordinates
    at each output time, shape (T, k)).
    """

    independent: tuple[int | str, ...] | None = eqx.field(static=True)
    switching: Switching
    partition: tuple[int, ...] | None = eqx.field(static=True)

    def __init__(
        self,
        independent: Sequence[int | str] | None = None,
        switching: bool | Switching = True,
        *,
        partition: tuple[int, ...] | None = None,
    ):
        self.independent = None if independent is None else tuple(independent)
        self.switching = get_switching(switching)
        self.partition = partition

    @property
    def name(self) -> str:
        return PARTITIONED

    def prepare(self, mechanism):
        structure = mechanism.structure
        if structure.rank == 0 or structure.dof == 0:
            raise ValueError(
                f"coordinate partitioning needs constraints and degrees of freedom; this "
                f"mechanism has rank {structure.rank} and k = {structure.dof}"
            )
        if self.independent is None:
            return self
        idx = coordinate_indices(mechanism, self.independent)
        if len(idx) != structure.dof:
            raise ValueError(
                f"independent has {len(idx)} coordinates; the mechanism has k = {structure.dof}"
            )
        mask = np.zeros(mechanism.n, bool)
        mask[idx] = True
        partition = tuple(int(i) for i in np.argsort(~mask, kind="stable"))
        return PartitionedCoordinates(self.independent, self.switching, partition=partition)

    def initial_state(self, mechanism, q0, qd0, t0, params, consistency_tol):
        structure = mechanism.structure
        k = structure.dof
        if self.partition is None:  # the best by the criterion at q0
            perm0 = _criteria(mechanism, q0, t0, jnp.arange(mechanism.n), params)[1]
        else:
            perm0 = jnp.asarray(self.partition, jnp.int32)
        y0 = (q0, qd0[perm0[:k]], perm0.astype(q0.dtype))
        # A bad given partition is replaced at once.
        repartition = _Repartition(mechanism, self.switching)
        y0, _ = repartition(t0, y0, (params, jnp.ones((), bool)))
        return y0, jnp.ones((), bool)

    def vector_field(self, mechanism, stabilization):
        return _CompactField(mechanism, stabilization)

    def wrap_solver(self, solver, mechanism, stabilization):
        project = _PositionProjector(mechanism, stabilization)
        return SwitchingSolver(
            solver,
            _Repartition(mechanism, self.switching),
            stabilization.end_of_step(project),
        )

    def physical_state(self, mechanism, y, t, params):
        q, v, perm_f = y
        return q, _velocities(mechanism, q, v, t, _as_perm(perm_f), params)[0]

    def outputs(self, mechanism, stabilization, y, t, params, *, interpolated=True):
        q, v, perm_f = y
        if interpolated:
            q = stabilization.project_positions(mechanism, q, t, params)
        perm = _as_perm(jnp.where(jnp.isfinite(perm_f), perm_f, -1.0))
        qd, _, qdd = compact_equations(mechanism, stabilization, t, q, v, perm, params)
        lam = multipliers_from_accelerations(mechanism, q, qd, qdd, t, params)
        return read_off(mechanism, q, qd, qdd, lam, t, params)

    def singular_conditions(self, mechanism):
        """The current partition's κ below `switching.singular_tol`."""
        switching = self.switching

        def partition_singular(t, y, args, **kwargs):
            params, valid = args
            q, _, perm_f = y
            current = _criteria(mechanism, q, t, _as_perm(perm_f), params)[0]
            return (current < switching.singular_tol) & valid

        return (partition_singular,)

    def statistics(self, ys, solver_state):
        perm = _as_perm(jnp.where(jnp.isfinite(ys[2]), ys[2], -1.0))
        return {**super().statistics(ys, solver_state), "independent": perm[..., : ys[1].shape[-1]]}
