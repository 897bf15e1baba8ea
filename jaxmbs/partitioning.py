"""Coordinate partitioning with the projective criterion (Blajer, Schiehlen, Schirm 1994).

**Projective criterion (§3).** The unit vector kᵢ along q̇ᵢ splits into its projections onto
the tangent subspace (spanned by any null-space basis P of the constraint Jacobian, C P = 0)
and onto the constrained subspace, measured in the metric M of the configuration space:

    cos²αᵢ = |kᵢ⁽ᵈ⁾|² / |kᵢ|² = [P (PᵀMP)⁻¹ Pᵀ]ᵢᵢ / (M⁻¹)ᵢᵢ               (eq 23a)
    cos²βᵢ = |kᵢ⁽ᶜ⁾|² / |kᵢ|² = [M⁻¹Cᵀ (CM⁻¹Cᵀ)⁻¹ CM⁻¹]ᵢᵢ / (M⁻¹)ᵢᵢ       (eq 23b)

P(PᵀMP)⁻¹Pᵀ does not depend on the basis, so the criterion of every coordinate comes at once
from one QR null-space basis, with no partition tried first; the two projectors add up to M⁻¹,
so cos²αᵢ + cos²βᵢ = 1. The larger cos²αᵢ, the better qᵢ serves as an independent coordinate;
cos²αᵢ = 0 is a singular choice. The SVD criterion is the same construction with M replaced by
the identity: geometry only, blind to the masses.

**Choice of the k = n − r independent coordinates.** With Z = P L⁻ᵀ (LLᵀ = PᵀMP, so ZᵀMZ = I)
and wᵢ = Zᵢ / √(M⁻¹)ᵢᵢ the i-th row scaled, |wᵢ|² = cos²αᵢ. Greedy pivoting on these rows —
take the coordinate of largest criterion, remove its direction from the other rows, repeat —
chooses coordinates in criterion order and never takes one whose row depends on those taken,
so the chosen rows W_I are nonsingular, which holds exactly when C_D is (C_D singular ⇔ some
tangent vector has zero independent part). The quality of a set is κ(I) = λ_min(W_I W_Iᵀ); for
k = 1 it is the paper's cos²α of the chosen coordinate.

**Compact partitioned equations (§2).** With q = [q_I; q_D], C_D nonsingular and C q̈ = Γ,

    q̇_D = A q̇_I + η,   A = −C_D⁻¹C_I,   η = −C_D⁻¹ b       (eq 7, with c = C q̇ + b)
    q̈_D = A q̈_I + ξ,   ξ = C_D⁻¹ Γ                         (eq 8)
    Dᵀ = [I; A] (eq 9),   M_d v̇_I = h_d,   M_d = DMDᵀ,   h_d = D(Q − M[0; ξ])   (eqs 12–14)

integrated for (q, v_I) together (k + n equations, eq 28 discussion): all of q is integrated, so
no nonlinear solve for q_D is needed, and q̇ = Dᵀv_I + [0; η] satisfies the velocity
constraints by construction; only Φ drifts, which projection removes.

**Switching during integration.** The partition is a permutation stored in the ODE state;
after each step the criterion of the current set is compared with the best set's and the
same (q, q̇) is re-expressed in the new independent velocities (see `jaxmbs.switching`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from . import inertia
from ._types import Array, ArrayLike, Coordinates, MassMatrix, Params
from .assembly import _fixed_indices
from .dynamics import resolve_structure
from .integrate import Solution
from .kinematics import (
    constraint_jacobian,
    position_residual,
    velocity_residual,
    velocity_residual_and_gamma,
)
from .stabilization import (
    AbstractStabilization,
    NoStabilization,
    Projection,
    get_stabilization,
    project_positions,
)
from .structure import Structure
from .switching import (
    Switching,
    SwitchingOptions,
    SwitchingSolver,
    initial_validity,
    integrate,
    make_solution,
    physical_outputs,
    prepare,
)

if TYPE_CHECKING:
    from .mechanism import Mechanism

# --------------------------------------------------------------------------- criterion


def metric_rows(M: MassMatrix, P: Array, metric: bool = True) -> Array:
    """Rows wᵢ with |wᵢ|² = cos²αᵢ (eq 23a) from any null-space basis P (n, k) of C.

    With LLᵀ = PᵀMP and Z = P L⁻ᵀ (ZᵀMZ = I): W = Z scaled row-wise by 1/√((M⁻¹)ᵢᵢ), so
    W Wᵀ is P(PᵀMP)⁻¹Pᵀ normalised by the lengths |kᵢ|² = (M⁻¹)ᵢᵢ (eq 19). `metric=False`
    replaces M by the identity (the geometry-only criterion).
    """
    n = M.shape[0]
    if not metric:
        M = jnp.eye(n, dtype=M.dtype)
    if P.shape[1] == 0:
        return P
    diag_minv = jnp.diag(jsl.cho_solve(jsl.cho_factor(M, lower=True), jnp.eye(n, dtype=M.dtype)))
    L = jnp.linalg.cholesky(P.T @ M @ P)
    Z = jsl.solve_triangular(L, P.T, lower=True).T
    return Z / jnp.sqrt(diag_minv)[:, None]


def tangent_rows(M: MassMatrix, C: Array, metric: bool = True) -> Array:
    """`metric_rows` for the QR null-space basis of the independent constraint rows C (r, n)."""
    n, r = M.shape[0], C.shape[0]
    if r == 0:
        return metric_rows(M, jnp.eye(n, dtype=M.dtype), metric)
    return metric_rows(M, jnp.linalg.qr(C.T, mode="complete")[0][:, r:], metric)


def _independent_rows(mechanism: Mechanism, structure: Structure, t, q, params) -> Array:
    return constraint_jacobian(mechanism, t, q, params)[jnp.asarray(structure.independent_rows)]


def _at(mechanism: Mechanism, q, t, params):
    """Concrete-or-traced evaluation point: q as an array, params, structure."""
    q = jnp.asarray(q)
    if not jnp.issubdtype(q.dtype, jnp.floating):
        q = q.astype(jnp.result_type(float))
    if q.shape != (mechanism.n,):
        raise ValueError(f"q must have shape ({mechanism.n},), got {q.shape}")
    params = mechanism.params if params is None else params
    return q, params, resolve_structure(mechanism, q, t)


def projective_criterion(
    mechanism: Mechanism, q: Coordinates, t=0.0, *, params: Params | None = None
) -> tuple[Array, Array]:
    """The projective criterion of every coordinate (Blajer et al. 1994, eqs 23a and 23b).

    **Arguments:**

    - `mechanism`: the mechanism (its constraint structure must be known).
    - `q`: a configuration, shape (n,); may be traced (jit, vmap).
    - `t`: time.
    - `params`: parameters (default the mechanism's).

    **Returns:** `(cos2_alpha, cos2_beta)`, each of shape (n,): the squared cosines between the
    unit vector of each coordinate and the tangent (α) or constrained (β) subspace, in the
    metric M. They are computed independently (α from a null-space basis, β from
    CM⁻¹Cᵀ), so cos²α + cos²β = 1 is a check, not an identity of the code.
    """
    q, params, structure = _at(mechanism, q, t, params)
    M = inertia.mass_matrix(mechanism, q, params)
    C = _independent_rows(mechanism, structure, t, q, params)
    W = tangent_rows(M, C)
    cos2_alpha = jnp.sum(W * W, axis=1)
    Mf = jsl.cho_factor(M, lower=True)
    if C.shape[0] == 0:
        return cos2_alpha, jnp.zeros_like(cos2_alpha)
    X = jsl.cho_solve(Mf, C.T)  # M⁻¹Cᵀ: columns of CM⁻¹ are kᵢ*⁽ᶜ⁾ (eq 18)
    Y = jsl.solve_triangular(jnp.linalg.cholesky(C @ X), X.T, lower=True)
    diag_minv = jnp.diag(jsl.cho_solve(Mf, jnp.eye(mechanism.n, dtype=M.dtype)))
    return cos2_alpha, jnp.sum(Y * Y, axis=0) / diag_minv


def svd_criterion(
    mechanism: Mechanism, q: Coordinates, t=0.0, *, params: Params | None = None
) -> Array:
    """Geometry-only criterion: squared norms of the rows of the SVD null-space basis of C.

    cos²αᵢ of the projective criterion with M replaced by the identity; the masses do not
    enter (Blajer et al. 1994, §6, the comparison with the SVD choice). Shape (n,).
    """
    q, params, structure = _at(mechanism, q, t, params)
    C = _independent_rows(mechanism, structure, t, q, params)
    _, _, Vt = jnp.linalg.svd(C, full_matrices=True)
    null = Vt[C.shape[0] :]
    return jnp.sum(null * null, axis=0)


def set_criterion(W: Array, independent: Array) -> Array:
    """κ(I) = λ_min(W_I W_Iᵀ) of the rows W of `tangent_rows` (cos²α of q_I when k = 1)."""
    WI = W[independent]
    return jnp.maximum(jnp.linalg.eigvalsh(WI @ WI.T)[0], 0.0)


def pivoted_choice(W: Array) -> Array:
    """Criterion-ordered pivoting on the rows of W: a mask of k = W.shape[1] coordinates.

    Each pass takes the row of largest remaining squared norm (the first pass: the largest
    cos²αᵢ) and removes its direction from all rows, so a coordinate whose row depends on the
    ones taken has zero remaining norm and is never taken: W_I, hence C_D, is nonsingular.
    """
    n, k = W.shape
    residual = W
    chosen = jnp.zeros(n, bool)
    for _ in range(k):
        norms = jnp.where(chosen, -1.0, jnp.sum(residual * residual, axis=1))
        i = jnp.argmax(norms)
        direction = residual[i] / jnp.sqrt(jnp.maximum(norms[i], jnp.finfo(W.dtype).tiny))
        residual = residual - jnp.outer(residual @ direction, direction)
        chosen = chosen.at[i].set(True)
    return chosen


def permutation(mask: Array) -> Array:
    """[independent indices ascending, dependent indices ascending] from a boolean mask."""
    return jnp.argsort(jnp.where(mask, 0, 1), stable=True).astype(jnp.int32)


def independent_coordinates(
    mechanism: Mechanism,
    q: Coordinates,
    t=0.0,
    *,
    params: Params | None = None,
    criterion: str = "projective",
) -> Array:
    """The k = n − r best independent coordinates at q, with C_D guaranteed nonsingular.

    **Arguments:** as `projective_criterion`, plus `criterion`: `"projective"` (M-weighted,
    eq 23a) or `"svd"` (geometry only).

    **Returns:** the indices of q_I in ascending order, shape (k,), chosen by criterion-ordered
    pivoting (see the module docstring); jit- and vmap-compatible.
    """
    if criterion not in ("projective", "svd"):
        raise ValueError(f"criterion must be 'projective' or 'svd', got {criterion!r}")
    q, params, structure = _at(mechanism, q, t, params)
    M = inertia.mass_matrix(mechanism, q, params)
    W = tangent_rows(M, _independent_rows(mechanism, structure, t, q, params), criterion == "svd")
    return permutation(pivoted_choice(W))[: structure.dof]


def coordinate_indices(mechanism: Mechanism, coordinates: Sequence[int | str]) -> np.ndarray:
    """Indices of coordinates given by index or name, checked for range and repetition."""
    idx = _fixed_indices(mechanism, coordinates)
    if np.any((idx < 0) | (idx >= mechanism.n)):
        raise ValueError(f"coordinate indices {idx.tolist()} out of range for n={mechanism.n}")
    if len(set(idx.tolist())) != len(idx):
        raise ValueError(f"coordinates repeated in {list(coordinates)}")
    return idx


def partition_criterion(
    mechanism: Mechanism,
    q: Coordinates,
    independent: Sequence[int | str],
    t=0.0,
    *,
    params: Params | None = None,
) -> Array:
    """Quality κ of a set of independent coordinates: λ_min(W_I W_Iᵀ) ∈ [0, 1].

    For one independent coordinate this is its cos²α (eq 23a); zero means C_D is singular.
    """
    idx = coordinate_indices(mechanism, independent)
    q, params, structure = _at(mechanism, q, t, params)
    if len(idx) != structure.dof:
        raise ValueError(
            f"{len(idx)} independent coordinates given; the mechanism has k = {structure.dof}"
        )
    M = inertia.mass_matrix(mechanism, q, params)
    W = tangent_rows(M, _independent_rows(mechanism, structure, t, q, params))
    return set_criterion(W, jnp.asarray(idx))


# ----------------------------------------------------------- compact partitioned equations


def _velocities(mechanism: Mechanism, structure: Structure, t, q, v, perm, params):
    """q̇ = Dᵀv_I + [0; η] (eqs 7, 9), with Dᵀ and the LU factors of C_D for reuse."""
    k, n = structure.dof, mechanism.n
    rows = jnp.asarray(structure.independent_rows)
    ind, dep = perm[:k], perm[k:]
    C = constraint_jacobian(mechanism, t, q, params)[rows]
    b = velocity_residual(mechanism, t, q, jnp.zeros_like(q), params)[rows]
    lu = jsl.lu_factor(C[:, dep])
    A = -jsl.lu_solve(lu, C[:, ind])
    eta = -jsl.lu_solve(lu, b)
    Dt = jnp.zeros((n, k), q.dtype).at[ind].set(jnp.eye(k, dtype=q.dtype)).at[dep].set(A)
    return Dt @ v + jnp.zeros_like(q).at[dep].set(eta), Dt, lu


def compact_equations(
    mechanism: Mechanism,
    structure: Structure,
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
    qd, Dt, lu = _velocities(mechanism, structure, t, q, v, perm, params)
    dep = perm[structure.dof :]
    c, gamma = velocity_residual_and_gamma(mechanism, t, q, qd, params)
    if not isinstance(stabilization, NoStabilization):
        gamma = stabilization.stabilized_gamma(gamma, position_residual(mechanism, t, q, params), c)
    gamma = gamma[jnp.asarray(structure.independent_rows)]
    xi = jnp.zeros_like(q).at[dep].set(jsl.lu_solve(lu, gamma))  # [0; ξ], eq 10
    M = inertia.mass_matrix(mechanism, q, params)
    Q = mechanism.forces(t, q, qd, params)
    Md = Dt.T @ M @ Dt  # eq 13
    hd = Dt.T @ (Q - M @ xi)  # eq 14
    vd = jsl.cho_solve(jsl.cho_factor(Md, lower=True), hd)  # eq 12
    return qd, vd, Dt @ vd + xi


def _as_perm(perm_f: Array) -> Array:
    return jnp.round(perm_f).astype(jnp.int32)


class _CompactField(eqx.Module):
    """(q, v_I, partition) ↦ (q̇, v̇_I, 0) for diffrax (eq 28 with all of q integrated)."""

    mechanism: Mechanism
    structure: Structure = eqx.field(static=True)
    stabilization: AbstractStabilization

    @eqx.filter_jit
    def __call__(self, t, y, args):
        params, valid = args
        q, v, perm_f = y
        qd, vd, _ = compact_equations(
            self.mechanism, self.structure, self.stabilization, t, q, v, _as_perm(perm_f), params
        )
        return jnp.where(valid, qd, 0.0), jnp.where(valid, vd, 0.0), jnp.zeros_like(perm_f)


def _criteria(mechanism, structure, t, q, perm, params):
    """κ of the current set, the best set's permutation and κ, the rank pivots of C."""
    k = structure.dof
    q, params = jax.lax.stop_gradient((q, params))
    M = inertia.mass_matrix(mechanism, q, params)
    C = _independent_rows(mechanism, structure, t, q, params)
    W = tangent_rows(M, C)
    best = permutation(pivoted_choice(W))
    pivots = jnp.abs(jnp.diag(jnp.linalg.qr(C.T)[1]))
    return set_criterion(W, perm[:k]), best, set_criterion(W, best[:k]), pivots


class _Repartition(eqx.Module):
    """After a step: switch to the best partition when `Switching` says so (same q, q̇)."""

    mechanism: Mechanism
    structure: Structure = eqx.field(static=True)
    switching: Switching

    @eqx.filter_jit
    def __call__(self, t, y, args):
        params, valid = args
        q, v, perm_f = y
        perm = _as_perm(perm_f)
        current, best, best_value, _ = _criteria(self.mechanism, self.structure, t, q, perm, params)
        switched = valid & self.switching.decide(current, best_value, jnp.any(best != perm))
        qd = _velocities(self.mechanism, self.structure, t, q, v, perm, params)[0]
        v_new = qd[best[: self.structure.dof]]
        y = (
            q,
            jnp.where(switched, v_new, v),
            jnp.where(switched, best.astype(perm_f.dtype), perm_f),
        )
        return y, switched


class _PositionProjector(eqx.Module):
    """Newton projection of q onto Φ = 0; v_I needs none (q̇ = Dᵀv_I + η is consistent)."""

    mechanism: Mechanism
    structure: Structure = eqx.field(static=True)
    iterations: int = eqx.field(static=True)

    @eqx.filter_jit
    def __call__(self, t, y, args):
        params, valid = args
        q, v, perm_f = y
        projected = project_positions(self.mechanism, self.structure, t, q, params, self.iterations)
        return jnp.where(valid, projected, q), v, perm_f


def _singular_event(mechanism, structure, switching: Switching, rank_rtol: float | None):
    """Terminating event: the current partition's κ below `singular_tol`, or C loses rank."""

    def cond_fn(t, y, args, **kwargs):
        params, valid = args
        q, _, perm_f = y
        current, _, _, pivots = _criteria(mechanism, structure, t, q, _as_perm(perm_f), params)
        singular = current < switching.singular_tol
        if rank_rtol is not None:
            singular = singular | (jnp.min(pivots) < rank_rtol * jnp.maximum(jnp.max(pivots), 1.0))
        return singular & valid

    return diffrax.Event(cond_fn)


SINGULAR_PARTITION = (
    "jaxmbs.simulate_partitioned: the independent coordinates became singular (C_D singular, "
    "criterion below singular_tol) with switching disabled, or the constraint Jacobian "
    "changed rank; the solution stops there"
)


def simulate_partitioned(
    mechanism: Mechanism,
    q0: ArrayLike,
    qd0: ArrayLike,
    t_span: tuple[ArrayLike, ArrayLike],
    *,
    independent: Sequence[int | str] | None = None,
    switching: bool | Switching = True,
    stabilization: str | AbstractStabilization = "projection",
    rtol: float = 1e-8,
    atol: float = 1e-8,
    saveat: ArrayLike | None = None,
    solver: diffrax.AbstractSolver | None = None,
    params: Params | None = None,
    dt0: float | None = None,
    max_steps: int = 100_000,
    adjoint: diffrax.AbstractAdjoint | None = None,
    consistency_tol: float = 1e-6,
    check_rank: bool = True,
    rank_rtol: float = 1e-8,
    progress_meter: diffrax.AbstractProgressMeter | None = None,
    throw: bool = True,
) -> Solution:
    """Simulate with coordinate partitioning in Blajer's compact form, re-partitioning as needed.

    The state is (q, v_I) plus the partition (Blajer et al. 1994, eqs 7–14 and the eq 28
    discussion); the partition starts from `independent` or from the projective criterion at
    q0, and switches after any step where the current set's criterion falls below
    `switching.threshold` or another set is `switching.ratio` times better. The physical
    state (q, q̇) is continuous across a switch; see `jaxmbs.switching`.

    **Arguments:** as `jaxmbs.simulate` (no `method`: the formulation is the partitioned one),
    plus

    - `independent`: initial independent coordinates (indices or names, k = n − r of them);
      default: the best by the projective criterion.
    - `switching`: `True`, `False` (keep the initial partition; stop with
      `RESULTS.singular_configuration` when it becomes singular) or a `jaxmbs.Switching`.
    - `stabilization`: `"projection"` (default; position Newton after each step), `"none"` or
      `"baumgarte"`. Velocities need none: q̇ = Dᵀv_I + [0; η] is consistent by construction.

    **Returns:** a `jaxmbs.Solution`; its `stats` also hold `num_switches` and `independent`
    (the independent coordinates at each output time, shape (T, k)).
    """
    mechanism, structure, q0, qd0, t0, t1, saveat = prepare(
        mechanism, q0, qd0, t_span, saveat, params, consistency_tol, throw
    )
    if structure.rank == 0 or structure.dof == 0:
        raise ValueError(
            f"coordinate partitioning needs constraints and degrees of freedom; this mechanism "
            f"has rank {structure.rank} and k = {structure.dof} (use jaxmbs.simulate)"
        )
    perm0 = np.full(mechanism.n, -1, np.int32)  # −1: choose by the criterion at q0
    if independent is not None:
        idx = coordinate_indices(mechanism, independent)
        if len(idx) != structure.dof:
            raise ValueError(
                f"independent has {len(idx)} coordinates; the mechanism has k = {structure.dof}"
            )
        mask = np.zeros(mechanism.n, bool)
        mask[idx] = True
        perm0 = np.argsort(~mask, kind="stable").astype(np.int32)
    options = SwitchingOptions(
        switching, solver, adjoint, progress_meter, rtol, atol, dt0, max_steps,
        consistency_tol, throw,
    )  # fmt: skip
    stabilization = get_stabilization(stabilization)
    rank_rtol = rank_rtol if check_rank else None
    return _solve_partitioned(
        mechanism, structure, stabilization, rank_rtol, q0, qd0, t0, t1, saveat, perm0, options
    )


@eqx.filter_jit
def _solve_partitioned(
    mechanism, structure, stabilization, rank_rtol, q0, qd0, t0, t1, saveat, perm0, options
) -> Solution:
    params = mechanism.params
    k = structure.dof
    ok, q0, qd0 = initial_validity(mechanism, t0, q0, qd0, options)
    best0 = _criteria(mechanism, structure, t0, q0, jnp.arange(mechanism.n), params)[1]
    perm0 = jnp.where(perm0[0] < 0, best0, perm0)
    y0 = (q0, qd0[perm0[:k]], perm0.astype(q0.dtype))
    args = (params, ok)
    repartition = _Repartition(mechanism, structure, options.switching)
    y0, _ = repartition(t0, y0, args)  # a bad given partition is replaced at once
    project = _PositionProjector(mechanism, structure, getattr(stabilization, "iterations", 0))
    solver = SwitchingSolver(stabilization.wrap_solver(options.solver, project), repartition)
    event = _singular_event(mechanism, structure, options.switching, rank_rtol)
    field = _CompactField(mechanism, structure, stabilization)
    out = integrate(field, solver, t0, t1, y0, args, saveat, options, event)
    ts, (q, v, perm_f) = out.ts, out.ys
    if isinstance(stabilization, Projection):
        q = jax.vmap(
            lambda t, q_: project_positions(
                mechanism, structure, t, q_, params, stabilization.iterations
            )
        )(ts, q)
    perm = _as_perm(jnp.where(jnp.isfinite(perm_f), perm_f, -1.0))

    def outputs(t, q_, v_, perm_):
        qd, _, qdd = compact_equations(
            mechanism, structure, stabilization, t, q_, v_, perm_, params
        )
        return (q_, qd, qdd, *physical_outputs(mechanism, structure, t, q_, qd, qdd, params))

    return make_solution(
        out,
        solver,
        options,
        ok,
        jax.vmap(outputs)(ts, q, v, perm),
        SINGULAR_PARTITION,
        independent=perm[:, :k],
    )
