"""`simulate_closing`: the minimal equations of closing conditions, switching between variants.

The closing conditions q_D = g(q_I, t), their A, η, ξ by autodiff and the minimal equations
(Blajer, Schiehlen, Schirm 1993, eqs 5–14) are in `jaxmbs.formulations.closing`; this module
integrates them for the state (q_I, v_I) (1994 eq 28) and moves between variants when the
active one degrades (1993 §3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Array, ArrayLike, Params
from ..formulations.closing import ClosingVariant, ResolvedVariant, resolve_variant
from ..kinematics.constraints import constraint_jacobian
from ..kinematics.criteria import metric_rows, set_criterion, tangent_rows
from ..model import inertia
from .solution import Solution
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
    from ..model import Mechanism

# ------------------------------------------------------------------------ integration


def _active(resolved: tuple[ResolvedVariant, ...], index, fn):
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
    resolved: tuple[ResolvedVariant, ...]

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
    resolved: tuple[ResolvedVariant, ...]
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
    resolved = tuple(resolve_variant(mechanism, v) for v in variants)
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
