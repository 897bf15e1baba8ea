"""Closing conditions from inverse kinematics (Blajer, Schiehlen, Schirm 1993; 1994 §4).

The user states the constraints explicitly, resolved for the dependent coordinates:

    q_D = g(q_I, t)                                           (1993 eq 5; 1994 eq 27)

and autodiff gives what the papers derive by hand (1993 eqs 6–7, 1994 eqs 7–8):

    q̇_D = A q̇_I + η,   A = ∂g/∂q_I,   η = ∂g/∂t
    q̈_D = A q̈_I + ξ,   ξ = Ȧ q̇_I + η̇   (one jvp of (q_I, t) ↦ A q̇_I + η along (q̇_I, 1))

With Dᵀ = [I; A] the minimal equations in the k independent coordinates are (1993 eqs 12–14)

    M' q̈_I = h',   M' = DMDᵀ,   h' = D(h − M[0; ξ]),

evaluated at q = [q_I; g(q_I, t)] and q̇ = Dᵀq̇_I + [0; η]. The state is (q_I, v_I) only
(1994 eq 28): the constraints hold to round-off at every output, with no stabilisation.

**Variants and switching.** A closing condition is singular where A is not defined (the
four-bar's case a, α1 independent, at sin α3 = 0). Several variants, each with its own
independent coordinates, can be given; after each step the integrator moves to the variant
whose independent set has the best projective criterion (`jaxmbs.partition_criterion`, computed
from the null-space basis Dᵀ of the active variant) when the active one degrades, re-expressing
the same q, q̇ in the new variant (1993 §3: the switch creates no inconsistency).

**Branches.** Inverse kinematics usually has several solutions (the ± of an arccos). A variant
may carry a `branch(q, p)` function giving the data that selects the solution (e.g. a sign);
it is evaluated from the full configuration whenever the variant is entered and stays fixed
while it is active, which is consistent because branches only meet at the variant's own
singularities. Angles returned by g are whatever g returns (e.g. principal values): after a
switch a dependent angle may differ from its earlier value by a multiple of 2π.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from . import inertia
from ._types import Array, ArrayLike, Params
from .integrate import Solution
from .kinematics import constraint_jacobian
from .partitioning import coordinate_indices, metric_rows, set_criterion, tangent_rows
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

ClosingFn = Callable[..., Array]  # g(t, q_I, p, branch) -> q_D
BranchFn = Callable[..., Array]  # (q, p) -> branch data


class ClosingVariant(eqx.Module):
    """One explicit form of the closing conditions, q_D = g(t, q_I, p, branch).

    **Arguments:**

    - `independent`: the independent coordinates q_I (indices or names); the dependent ones
      q_D are the others in ascending order.
    - `closing`: `g(t, q_I, p, branch) -> q_D`, shape (n − k,). Pure JAX, differentiable.
    - `branch`: `(q, p) -> array`, the data selecting the solution branch of g at a full
      configuration q (default: none; g then receives an empty array).
    - `name`: a label for messages.
    """

    independent: tuple[int | str, ...] = eqx.field(static=True, converter=tuple)
    closing: ClosingFn = eqx.field(static=True)
    branch: BranchFn | None = eqx.field(static=True, default=None)
    name: str = eqx.field(static=True, default="")

    def __check_init__(self):
        if len(self.independent) == 0:
            raise ValueError(
                "a closing-condition variant needs at least one independent coordinate"
            )
        if not callable(self.closing):
            raise ValueError("closing must be a callable g(t, q_I, p, branch) -> q_D")


class ClosingTerms(eqx.Module):
    """A variant evaluated at (t, q_I, q̇_I): full q, q̇, and A, η, ξ (1993 eqs 5–7)."""

    q: Array
    qd: Array
    A: Array
    eta: Array
    xi: Array


class _Resolved(eqx.Module):
    """A variant with its index sets resolved for a mechanism (static)."""

    variant: ClosingVariant
    ind: tuple[int, ...] = eqx.field(static=True)
    dep: tuple[int, ...] = eqx.field(static=True)

    def branch_of(self, q, params) -> Array:
        if self.variant.branch is None:
            return jnp.zeros((0,), q.dtype)
        return jnp.asarray(self.variant.branch(q, params), q.dtype)

    def terms(self, t, qI, vI, params, branch) -> ClosingTerms:
        t = jnp.asarray(t, qI.dtype)

        def g(qI_, t_):
            return jnp.asarray(self.variant.closing(t_, qI_, params, branch))

        def g_and_rate(qI_, t_):
            return jax.jvp(g, (qI_, t_), (vI, jnp.ones_like(t_)))  # (q_D, A v_I + η)

        (qD, qD_dot), (_, xi) = jax.jvp(g_and_rate, (qI, t), (vI, jnp.ones_like(t)))
        A = jax.jacfwd(g)(qI, t)
        n = len(self.ind) + len(self.dep)
        ind, dep = np.asarray(self.ind), np.asarray(self.dep)
        q = jnp.zeros(n, qI.dtype).at[ind].set(qI).at[dep].set(qD)
        qd = jnp.zeros(n, qI.dtype).at[ind].set(vI).at[dep].set(qD_dot)
        return ClosingTerms(q=q, qd=qd, A=A, eta=qD_dot - A @ vI, xi=xi)

    def transpose_D(self, A) -> Array:
        """Dᵀ = [I; A] in the mechanism's coordinate order (1993 eq 11)."""
        k = len(self.ind)
        n = k + len(self.dep)
        Dt = jnp.zeros((n, k), A.dtype)
        return (
            Dt.at[np.asarray(self.ind)]
            .set(jnp.eye(k, dtype=A.dtype))
            .at[np.asarray(self.dep)]
            .set(A)
        )

    def accelerations(self, mechanism, t, qI, vI, params, branch):
        """(terms, Dᵀ, v̇_I, q̈) from the minimal equations (12)–(14)."""
        terms = self.terms(t, qI, vI, params, branch)
        Dt = self.transpose_D(terms.A)
        M_d, h_d, xi_full = _minimal(mechanism, t, terms, Dt, self.dep, params)
        vd = jsl.cho_solve(jsl.cho_factor(M_d, lower=True), h_d)
        return terms, Dt, vd, Dt @ vd + xi_full


def _minimal(mechanism, t, terms: ClosingTerms, Dt, dep, params):
    """M' = DMDᵀ, h' = D(h − M[0; ξ]) (1993 eqs 12–14), and [0; ξ] in mechanism order."""
    M = inertia.mass_matrix(mechanism, terms.q, params)
    Q = mechanism.forces(t, terms.q, terms.qd, params)
    xi_full = jnp.zeros_like(terms.q).at[np.asarray(dep)].set(terms.xi)
    return Dt.T @ M @ Dt, Dt.T @ (Q - M @ xi_full), xi_full


def _resolve(mechanism: Mechanism, variant: ClosingVariant) -> _Resolved:
    ind = coordinate_indices(mechanism, variant.independent)
    dep = np.setdiff1d(np.arange(mechanism.n), ind)
    if len(dep) == 0:
        raise ValueError("a closing-condition variant must leave some coordinates dependent")
    q = jax.ShapeDtypeStruct((len(ind),), jnp.result_type(float))
    t = jax.ShapeDtypeStruct((), jnp.result_type(float))
    branch = (
        jax.eval_shape(
            variant.branch, jax.ShapeDtypeStruct((mechanism.n,), q.dtype), mechanism.params
        )
        if variant.branch is not None
        else jax.ShapeDtypeStruct((0,), q.dtype)
    )
    shape = jax.eval_shape(variant.closing, t, q, mechanism.params, branch).shape
    if shape != (len(dep),):
        raise ValueError(
            f"closing condition {variant.name or variant.independent} must return q_D of shape "
            f"({len(dep)},), got {shape}"
        )
    return _Resolved(variant, tuple(int(i) for i in ind), tuple(int(i) for i in dep))


def closing_terms(
    mechanism: Mechanism,
    variant: ClosingVariant,
    t,
    q_I: ArrayLike,
    v_I: ArrayLike,
    *,
    params: Params | None = None,
    branch: ArrayLike | None = None,
) -> ClosingTerms:
    """Evaluate a closing-condition variant: q, q̇ and A, η, ξ by autodiff (1993 eqs 5–7).

    **Returns:** `ClosingTerms` with `q`, `qd` (full, mechanism order), `A` (n − k, k),
    `eta` and `xi` (n − k,).
    """
    params = mechanism.params if params is None else params
    resolved = _resolve(mechanism, variant)
    q_I = jnp.asarray(q_I, jnp.result_type(float))
    branch = jnp.zeros((0,), q_I.dtype) if branch is None else jnp.asarray(branch, q_I.dtype)
    return resolved.terms(t, q_I, jnp.asarray(v_I, q_I.dtype), params, branch)


def minimal_equations(
    mechanism: Mechanism,
    variant: ClosingVariant,
    t,
    q_I: ArrayLike,
    v_I: ArrayLike,
    *,
    params: Params | None = None,
    branch: ArrayLike | None = None,
) -> tuple[Array, Array]:
    """M'(q_I, t) and h'(q̇_I, q_I, t) of the minimal equations M' q̈_I = h' (1993 eqs 12–14)."""
    params = mechanism.params if params is None else params
    resolved = _resolve(mechanism, variant)
    terms = closing_terms(mechanism, variant, t, q_I, v_I, params=params, branch=branch)
    return _minimal(mechanism, t, terms, resolved.transpose_D(terms.A), resolved.dep, params)[:2]


# ------------------------------------------------------------------------ integration


def _active(resolved: tuple[_Resolved, ...], index, fn):
    """Apply `fn(variant_number, resolved_variant)` for the active variant (lax.switch)."""
    if len(resolved) == 1:
        return fn(0, resolved[0])
    branches = [lambda j=j, r=r: fn(j, r) for j, r in enumerate(resolved)]
    return jax.lax.switch(index, branches)


def _index(active_f) -> Array:
    return jnp.round(active_f).astype(jnp.int32)


class _MinimalField(eqx.Module):
    """(q_I, v_I, variant, branches) ↦ (v_I, v̇_I, 0, 0): 1994 eq 28 with closing conditions."""

    mechanism: Mechanism
    resolved: tuple[_Resolved, ...]

    @eqx.filter_jit
    def __call__(self, t, y, args):
        params, valid = args
        qI, vI, active_f, branches = y

        def vd_of(j, r):
            return r.accelerations(self.mechanism, t, qI, vI, params, branches[j])[2]

        vd = _active(self.resolved, _index(active_f), vd_of)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, (active_f, branches))
        return (jnp.where(valid, vI, 0.0), jnp.where(valid, vd, 0.0), *zeros)


def _variant_criteria(mechanism, resolved, t, y, params):
    """Full q, q̇ of the active variant and κ of every variant's independent set."""
    qI, vI, active_f, branches = y

    def state_of(j, r):
        terms = r.terms(t, qI, vI, params, branches[j])
        P = jnp.linalg.qr(r.transpose_D(terms.A))[0]  # orthonormal basis of the tangent space
        return terms.q, terms.qd, P

    q, qd, P = _active(resolved, _index(active_f), state_of)
    Wq, Wp = jax.lax.stop_gradient((q, params))
    W = metric_rows(inertia.mass_matrix(mechanism, Wq, Wp), jax.lax.stop_gradient(P))
    kappa = jnp.stack([set_criterion(W, jnp.asarray(r.ind)) for r in resolved])
    return q, qd, kappa


class _SwitchVariant(eqx.Module):
    """After a step: move to the best variant when `Switching` says so (same q, q̇)."""

    mechanism: Mechanism
    resolved: tuple[_Resolved, ...]
    switching: Switching

    @eqx.filter_jit
    def __call__(self, t, y, args):
        params, valid = args
        qI, vI, active_f, branches = y
        q, qd, kappa = _variant_criteria(self.mechanism, self.resolved, t, y, params)
        active = _index(active_f)
        best = jnp.argmax(kappa)
        switched = valid & self.switching.decide(kappa[active], kappa[best], best != active)
        table = jnp.asarray(np.array([r.ind for r in self.resolved]))
        new_branches = tuple(
            jnp.where(switched & (best == j), r.branch_of(q, params), b)
            for j, (r, b) in enumerate(zip(self.resolved, branches, strict=True))
        )
        y = (
            jnp.where(switched, q[table[best]], qI),
            jnp.where(switched, qd[table[best]], vI),
            jnp.where(switched, best.astype(active_f.dtype), active_f),
            new_branches,
        )
        return y, switched


def _variant_event(mechanism, resolved, switching: Switching):
    """Terminating event: the active variant's κ below `singular_tol`."""

    def cond_fn(t, y, args, **kwargs):
        params, valid = args
        _, _, kappa = _variant_criteria(mechanism, resolved, t, y, params)
        return (kappa[_index(y[2])] < switching.singular_tol) & valid

    return diffrax.Event(cond_fn)


SINGULAR_VARIANT = (
    "jaxmbs.simulate_closing: the active closing-condition variant reached its singularity "
    "(criterion below singular_tol) and no switch was possible or allowed; the solution stops "
    "there"
)


def simulate_closing(
    mechanism: Mechanism,
    variants: ClosingVariant | Sequence[ClosingVariant],
    q0: ArrayLike,
    qd0: ArrayLike,
    t_span: tuple[ArrayLike, ArrayLike],
    *,
    variant: int | None = None,
    switching: bool | Switching = True,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    saveat: ArrayLike | None = None,
    solver: diffrax.AbstractSolver | None = None,
    params: Params | None = None,
    dt0: float | None = None,
    max_steps: int = 100_000,
    adjoint: diffrax.AbstractAdjoint | None = None,
    consistency_tol: float = 1e-6,
    progress_meter: diffrax.AbstractProgressMeter | None = None,
    throw: bool = True,
) -> Solution:
    """Integrate the minimal equations of closing conditions, switching between variants.

    **Arguments:**

    - `mechanism`: the open-loop mechanism (its M and forces; its constraints Φ, when it has
      them, are used only to check q0 and to report residuals and multipliers).
    - `variants`: one or several `jaxmbs.ClosingVariant`, all with the same number k of
      independent coordinates.
    - `q0`, `qd0`: a consistent initial state in all coordinates.
    - `variant`: the variant to start with (default: the one with the best criterion at q0).
    - `switching`: `True`, `False` (stay in the initial variant; stop with
      `RESULTS.singular_configuration` at its singularity) or a `jaxmbs.Switching`.
    - the rest as `jaxmbs.simulate`.

    **Returns:** a `jaxmbs.Solution` in all coordinates; `stats` also hold `num_switches` and
    `variant` (the active variant at each output time, shape (T,)).
    """
    variants = (variants,) if isinstance(variants, ClosingVariant) else tuple(variants)
    if not variants:
        raise ValueError("simulate_closing needs at least one closing-condition variant")
    resolved = tuple(_resolve(mechanism, v) for v in variants)
    if len({len(r.ind) for r in resolved}) != 1:
        raise ValueError(
            "all closing-condition variants must have the same number of independent coordinates"
        )
    if variant is not None and not 0 <= variant < len(variants):
        raise ValueError(f"variant must be in [0, {len(variants)}), got {variant}")
    mechanism, structure, q0, qd0, t0, t1, saveat = prepare(
        mechanism, q0, qd0, t_span, saveat, params, consistency_tol, throw
    )
    k = len(resolved[0].ind)
    if structure.rank and structure.dof != k:
        raise ValueError(
            f"the variants have k = {k} independent coordinates but the mechanism's constraints "
            f"leave {structure.dof} degrees of freedom"
        )
    options = SwitchingOptions(
        switching, solver, adjoint, progress_meter, rtol, atol, dt0, max_steps,
        consistency_tol, throw,
    )  # fmt: skip
    start = jnp.asarray(-1 if variant is None else variant, jnp.int32)  # −1: best at q0
    return _solve_closing(mechanism, structure, resolved, q0, qd0, t0, t1, saveat, start, options)


def _initial_variant(mechanism, structure, resolved, t0, q0, params) -> Array:
    """The variant whose independent set has the best criterion at q0."""
    if structure.rank:
        C = constraint_jacobian(mechanism, t0, q0, params)[jnp.asarray(structure.independent_rows)]
        W = tangent_rows(inertia.mass_matrix(mechanism, q0, params), C)
    else:
        r = resolved[0]
        branch = r.branch_of(q0, params)
        terms = r.terms(t0, q0[np.asarray(r.ind)], jnp.zeros(len(r.ind), q0.dtype), params, branch)
        M = inertia.mass_matrix(mechanism, q0, params)
        W = metric_rows(M, jnp.linalg.qr(r.transpose_D(terms.A))[0])
    W = jax.lax.stop_gradient(W)
    return jnp.argmax(jnp.stack([set_criterion(W, jnp.asarray(r.ind)) for r in resolved]))


@eqx.filter_jit
def _solve_closing(mechanism, structure, resolved, q0, qd0, t0, t1, saveat, variant, options):
    params = mechanism.params
    ok, q0, qd0 = initial_validity(mechanism, t0, q0, qd0, options)
    best = _initial_variant(mechanism, structure, resolved, t0, q0, params)
    active = jnp.where(variant < 0, best, variant)
    table = jnp.asarray(np.array([r.ind for r in resolved]))
    branches = tuple(r.branch_of(q0, params) for r in resolved)
    y0 = (q0[table[active]], qd0[table[active]], active.astype(q0.dtype), branches)
    # The variant must reproduce the given velocities (a wrong branch or variant would not).
    _, qd_rec, _ = _variant_criteria(mechanism, resolved, t0, y0, params)
    scale = jnp.maximum(1.0, jnp.max(jnp.abs(qd0)))
    ok = ok & (jnp.max(jnp.abs(qd_rec - qd0)) <= options.consistency_tol * scale)
    args = (params, ok)
    switch = _SwitchVariant(mechanism, resolved, options.switching)
    y0, _ = switch(t0, y0, args)
    solver = SwitchingSolver(options.solver, switch)
    event = _variant_event(mechanism, resolved, options.switching)
    out = integrate(_MinimalField(mechanism, resolved), solver, t0, t1, y0, args, saveat,
                    options, event)  # fmt: skip
    qI, vI, active_f, branches = out.ys
    index = _index(jnp.where(jnp.isfinite(active_f), active_f, 0.0))

    def outputs(t, qI_, vI_, j, branches_):
        def of(i, r):
            terms, _, _, qdd = r.accelerations(mechanism, t, qI_, vI_, params, branches_[i])
            return terms.q, terms.qd, qdd

        q, qd, qdd = _active(resolved, j, of)
        return (q, qd, qdd, *physical_outputs(mechanism, structure, t, q, qd, qdd, params))

    return make_solution(
        out,
        solver,
        options,
        ok,
        jax.vmap(outputs)(out.ts, qI, vI, index, branches),
        SINGULAR_VARIANT,
        variant=index,
    )
