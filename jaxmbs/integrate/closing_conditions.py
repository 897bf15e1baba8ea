"""The state space of closing conditions: minimal equations, switching between variants.

The closing conditions q_D = g(q_I, t), their A, η, ξ by autodiff and the minimal equations
(Blajer, Schiehlen, Schirm 1993, eqs 5–14) are in `jaxmbs.formulations.closing`; this module
integrates them for the state (q_I, v_I) (1994 eq 28) and moves between variants when the
active one degrades (1993 §3).
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Array
from ..formulations.closing import ClosingVariant, ResolvedVariant, resolve_variant
from ..kinematics import algebra
from ..kinematics.constraints import constraint_jacobian
from ..kinematics.criteria import metric_rows, set_criterion, tangent_rows
from .state_space import AbstractStateFunction, read_off
from .switching import (
    AbstractSwitchingStateSpace,
    Switching,
    SwitchingSolver,
    get_switching,
    multipliers_from_accelerations,
)


def _active(resolved: tuple[ResolvedVariant, ...], index, fn):
    """Apply `fn(variant_number, resolved_variant)` for the active variant (lax.switch)."""
    if len(resolved) == 1:
        return fn(0, resolved[0])
    branches = [lambda j=j, r=r: fn(j, r) for j, r in enumerate(resolved)]
    return jax.lax.switch(index, branches)


def _index(active_f) -> Array:
    return jnp.round(active_f).astype(jnp.int32)


class _MinimalField(AbstractStateFunction):
    """(q_I, v_I, variant, branches) ↦ (v_I, v̇_I, 0, 0): 1994 eq 28 with closing conditions."""

    resolved: tuple[ResolvedVariant, ...]

    def evaluate(self, y, t, params, valid):
        qI, vI, active_f, branches = y

        def vd_of(j, r):
            return r.accelerations(self.mechanism, qI, vI, t, params, branches[j])[2]

        vd = _active(self.resolved, _index(active_f), vd_of)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, (active_f, branches))
        return (jnp.where(valid, vI, 0.0), jnp.where(valid, vd, 0.0), *zeros)


def _variant_criteria(mechanism, resolved, y, t, params):
    """Full q, q̇ of the active variant and κ of every variant's independent set."""
    qI, vI, active_f, branches = y

    def state_of(j, r):
        terms = r.terms(qI, vI, t, params, branches[j])
        P = jnp.linalg.qr(r.transpose_D(terms.A))[0]  # orthonormal basis of the tangent space
        return terms.q, terms.qd, P

    q, qd, P = _active(resolved, _index(active_f), state_of)
    Wq, Wp = jax.lax.stop_gradient((q, params))
    W = metric_rows(algebra.mass_matrix(mechanism, Wq, Wp), jax.lax.stop_gradient(P))
    kappa = jnp.stack([set_criterion(W, jnp.asarray(r.ind)) for r in resolved])
    return q, qd, kappa


class _SwitchVariant(AbstractStateFunction):
    """After a step: move to the best variant when `Switching` says so (same q, q̇)."""

    resolved: tuple[ResolvedVariant, ...]
    switching: Switching

    def evaluate(self, y, t, params, valid):
        qI, vI, active_f, branches = y
        q, qd, kappa = _variant_criteria(self.mechanism, self.resolved, y, t, params)
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


def _initial_variant(mechanism, resolved, q0, t0, params) -> Array:
    """The variant whose independent set has the best criterion at q0."""
    structure = mechanism.structure
    if structure.rank:
        C = constraint_jacobian(mechanism, q0, t0, params)[jnp.asarray(structure.independent_rows)]
        W = tangent_rows(algebra.mass_matrix(mechanism, q0, params), C)
    else:
        r = resolved[0]
        branch = r.branch_of(q0, params)
        terms = r.terms(q0[np.asarray(r.ind)], jnp.zeros(len(r.ind), q0.dtype), t0, params, branch)
        M = algebra.mass_matrix(mechanism, q0, params)
        W = metric_rows(M, jnp.linalg.qr(r.transpose_D(terms.A))[0])
    W = jax.lax.stop_gradient(W)
    return jnp.argmax(jnp.stack([set_criterion(W, jnp.asarray(r.ind)) for r in resolved]))


class ClosingConditions(AbstractSwitchingStateSpace):
    """Integrate the minimal equations of explicit closing conditions, switching between
    variants (Blajer, Schiehlen, Schirm 1993; 1994 §4).

    The state is (q_I, v_I) of the active variant plus the variant and the branch data
    (1994 eq 28); q_D = g(q_I, t) holds to round-off at every output, so a stabilisation
    has nothing to do (it is accepted and unused). The mechanism's own constraints Φ, when it
    has them, check q0 and give the residuals, the rank check and the multipliers.

    **Arguments:**

    - `variants`: one or several `jaxmbs.ClosingVariant`, all with the same number k of
      independent coordinates.
    - `variant`: the variant to start with (default: the one with the best criterion at q0).
    - `switching`: `True`, `False` (stay in the initial variant; stop with
      `RESULTS.singular_configuration` at its singularity) or a `jaxmbs.Switching`.

    `Solution.stats` also hold `num_switches` and `variant` (the active variant at each output
    time, shape (T,)).
    """

    variants: tuple[ClosingVariant, ...]
    variant: int | None = eqx.field(static=True)
    switching: Switching
    resolved: tuple[ResolvedVariant, ...] | None

    def __init__(
        self,
        variants: ClosingVariant | Sequence[ClosingVariant],
        variant: int | None = None,
        switching: bool | Switching = True,
        *,
        resolved: tuple[ResolvedVariant, ...] | None = None,
    ):
        variants = (variants,) if isinstance(variants, ClosingVariant) else tuple(variants)
        if not variants:
            raise ValueError("closing conditions need at least one variant")
        if variant is not None and not 0 <= variant < len(variants):
            raise ValueError(f"variant must be in [0, {len(variants)}), got {variant}")
        self.variants = variants
        self.variant = variant
        self.switching = get_switching(switching)
        self.resolved = resolved

    @property
    def name(self) -> str:
        return "closing-conditions"

    def prepare(self, mechanism):
        structure = mechanism.structure
        resolved = tuple(resolve_variant(mechanism, v) for v in self.variants)
        if len({len(r.ind) for r in resolved}) != 1:
            raise ValueError(
                "all closing-condition variants must have the same number of independent "
                "coordinates"
            )
        k = len(resolved[0].ind)
        if structure.rank and structure.dof != k:
            raise ValueError(
                f"the variants have k = {k} independent coordinates but the mechanism's "
                f"constraints leave {structure.dof} degrees of freedom"
            )
        return ClosingConditions(self.variants, self.variant, self.switching, resolved=resolved)

    def initial_state(self, mechanism, q0, qd0, t0, params, consistency_tol):
        resolved = self.resolved
        if self.variant is None:
            active = _initial_variant(mechanism, resolved, q0, t0, params)
        else:
            active = jnp.asarray(self.variant, jnp.int32)
        table = jnp.asarray(np.array([r.ind for r in resolved]))
        branches = tuple(r.branch_of(q0, params) for r in resolved)
        y0 = (q0[table[active]], qd0[table[active]], active.astype(q0.dtype), branches)
        # The variant must reproduce the given velocities (a wrong branch or variant would not).
        _, qd_rec, _ = _variant_criteria(mechanism, resolved, y0, t0, params)
        scale = jnp.maximum(1.0, jnp.max(jnp.abs(qd0)))
        representable = jnp.max(jnp.abs(qd_rec - qd0)) <= consistency_tol * scale
        switch = _SwitchVariant(mechanism, resolved, self.switching)
        y0, _ = switch(t0, y0, (params, representable))
        return y0, representable

    def vector_field(self, mechanism, stabilization):
        return _MinimalField(mechanism, self.resolved)

    def wrap_solver(self, solver, mechanism, stabilization):
        switch = _SwitchVariant(mechanism, self.resolved, self.switching)
        return SwitchingSolver(solver, switch)

    def physical_state(self, mechanism, y, t, params):
        q, qd, _ = _variant_criteria(mechanism, self.resolved, y, t, params)
        return q, qd

    def outputs(self, mechanism, stabilization, y, t, params, *, interpolated=True):
        qI, vI, active_f, branches = y
        index = _index(jnp.where(jnp.isfinite(active_f), active_f, 0.0))

        def of(i, r):
            terms, _, _, qdd = r.accelerations(mechanism, qI, vI, t, params, branches[i])
            return terms.q, terms.qd, qdd

        q, qd, qdd = _active(self.resolved, index, of)
        lam = multipliers_from_accelerations(mechanism, q, qd, qdd, t, params)
        return read_off(mechanism, q, qd, qdd, lam, t, params)

    def singular_conditions(self, mechanism):
        """The active variant's κ below `switching.singular_tol`."""
        resolved, switching = self.resolved, self.switching

        def variant_singular(t, y, args, **kwargs):
            params, valid = args
            _, _, kappa = _variant_criteria(mechanism, resolved, y, t, params)
            return (kappa[_index(y[2])] < switching.singular_tol) & valid

        return (variant_singular,)

    def statistics(self, ys, solver_state):
        variant = _index(jnp.where(jnp.isfinite(ys[2]), ys[2], 0.0))
        return {**super().statistics(ys, solver_state), "variant": variant}
