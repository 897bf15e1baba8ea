"""Reverse mode of an adaptive solve: a discrete adjoint over the forward run's accepted steps.

**What is differentiated.** diffrax's PID controller stops gradients through its decisions,
so the derivative of an adaptive solve is the derivative of the integration on its accepted
grid t₀ < t₁ < … < t_N. On that grid the run is the recurrence

    s_{k+1} = S(s_k; t_k, t_{k+1}, θ),    s_k = (y_k, σ_k),

S the wrapped solver's step (`solver.step`: the stage sums of the tableau, an implicit
method's stage Newton solves, the stabilisation's end-of-step projection, a switch of
coordinates), y the ODE state, σ the solver state (the first-same-as-last stage f(t_k, ·) of
the previous step's end, taken before its projection; switching flags) and θ everything
else the step reads (parameters, the mechanism's arrays). The outputs are the final state
y_N and the dense output y(τ_j) = I_k(τ_j) of the step k that contains each output time
τ_j ∈ (t_k, t_{k+1}] (diffrax's rule; τ_j ≤ t₀ belongs to step 0).

**The adjoint recurrence.** With ā_k = ∂L/∂s_k and d̄_k the cotangent of step k's dense
output (the sum of the interpolation's vjp over the output times it holds),

    ā_N = (ȳ_N, 0),    (ā_k, θ̄_k) = vjp_S(s_k, θ)(ā_{k+1}, d̄_k),    θ̄ = Σ_k θ̄_k,

and ȳ₀ from ā₀ through the solver's initial state σ₀ = init(y₀). One backward loop in
reverse over the recorded steps applies the vjp of one step function, so the integration
loop is never linearised or transposed: the program holds the step, its vjp and the
interpolation's vjp once each. An implicit method's stage solve is differentiated by the
implicit function theorem (optimistix), the projection by its own derivative rule
(`jaxmbs.integrate.stabilization.projection`).

**What the backward pass needs and keeps.** The forward pass is the adaptive solve, which
also records its accepted step times (`SubSaveAt(steps=True)`: 8 bytes per step of
`max_steps`). The states s_k are recomputed from those times — the same steps, whatever the
rounding, since the times are given — in segments of `segment` steps: one loop visits the
segments forward, keeping s_k at every segment's start (⌈max_steps / segment⌉ checkpoints),
then back, recomputing each earlier segment from its checkpoint; the last segment is swept
as soon as its states are known, each earlier one after its recomputation. The program
holds the step once, inside its vjp: a recomputation is the vjp's forward pass, whose
pullback runs only in the sweep (four-bar reverse gradient: 14 553 → 12 544 operations and
~0.6 s less compile, its run ~10 % longer; McPherson strut: 56 616 → 47 875, run
unchanged). Memory: (segment + ⌈max_steps/segment⌉) states, independent of the steps a run
takes; work: one or two recomputations of the accepted steps (none of the rejected ones)
and one vjp per step.
The first step's start and a last step that ends at t1 carry the derivatives with respect
to t0 and t1; the other step times are decisions (no gradient).
A run stopped by a failure ends its recurrence at its last accepted step (the outputs past
it are NaN, `jaxmbs.simulate`); a user's event without a root finder stops at a step's end,
whose time is a decision too. An event located by a root finder is left to diffrax's own
adjoint (`jaxmbs.simulate`), which differentiates the root.

**Why not diffrax's checkpointed adjoint.** Its backward pass recomputes the adaptive
steps, compiled anew: last-bit differences of the recomputed stages shift the error
estimate (a difference of nearly equal stage sums) and with it the next step, until an
accept/reject decision flips and the backward pass carries the cotangents of one run
through the steps of another (48 % off in one component of a rough-road quarter car's
gradient). Here the steps are given.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.types import Array, PyTree


class Integration(NamedTuple):
    """What the backward pass needs to retake one step: the diffrax terms and wrapped
    solver, the initial state, the solve's `args`, its time span and output times (None:
    none). Built from the problem alone, so that the vjp of a step reaches every array the
    step reads."""

    terms: diffrax.AbstractTerm
    solver: diffrax.AbstractSolver
    y0: PyTree
    args: PyTree
    t0: Array
    t1: Array
    saveat: Array | None


# `run(problem, record_steps) -> diffrax.Solution`: the adaptive solve, whose last
# `SubSaveAt` records the accepted steps' end times when `record_steps` is True; its first
# `SubSaveAt` is the final state (t1=True), the second the output times (if any).
Run = Callable[[PyTree, bool], diffrax.Solution]
# `prepare(problem) -> Integration`.
Prepare = Callable[[PyTree], Integration]


class DiscreteAdjoint(eqx.Module):
    """Reverse mode of `jaxmbs.simulate` by the discrete adjoint over the forward run's
    accepted steps (module notes); the default.

    **Arguments:**

    - `segment`: steps recomputed and kept at once in the backward pass (None: ⌈√max_steps⌉,
      which keeps ~2√max_steps states). Runs of up to `segment` steps recompute their steps
      once, longer runs twice.
    """

    segment: int | None = eqx.field(default=None, static=True)

    def segment_for(self, max_steps: int) -> int:
        """The segment length for a solve of at most `max_steps` steps."""
        if self.segment is None:
            return max(1, math.isqrt(max_steps - 1) + 1)
        if self.segment < 1:
            raise ValueError(f"segment must be a positive number of steps, got {self.segment}")
        return min(self.segment, max_steps)


def _without_steps(out: diffrax.Solution) -> diffrax.Solution:
    """The solution without its last `SubSaveAt` (the recorded steps)."""
    return eqx.tree_at(lambda s: (s.ts, s.ys), out, (out.ts[:-1], out.ys[:-1]))


@eqx.filter_custom_vjp
def adjoint_solve(problem: PyTree, run: Run, prepare: Prepare, segment: int):
    """`run(problem, False)`, differentiated in reverse mode by the discrete adjoint (module
    notes). `run` and `prepare` must build everything from `problem` (no closed-over
    arrays: their derivatives would be lost)."""
    return run(problem, False)


@adjoint_solve.def_fwd
def _adjoint_fwd(perturbed, problem, run: Run, prepare: Prepare, segment: int):
    del perturbed
    out = run(problem, True)
    grid = jax.lax.stop_gradient(out.ts[-1])
    return _without_steps(out), (grid, out.stats["num_accepted_steps"])


def _zeros_for_none(cotangent: PyTree, like: PyTree) -> PyTree:
    """The cotangent with its None leaves (zero cotangents) as zeros shaped like `like`."""
    if cotangent is None:
        return jax.tree_util.tree_map(jnp.zeros_like, like)
    return jax.tree_util.tree_map(
        lambda c, x: jnp.zeros_like(x) if c is None else c,
        cotangent,
        like,
        is_leaf=lambda c: c is None,
    )


def _add(a: PyTree, b: PyTree) -> PyTree:
    """Leafwise sum of two cotangent trees (None: zero)."""
    return jax.tree_util.tree_map(
        lambda x, y: x if y is None else (y if x is None else x + y),
        a,
        b,
        is_leaf=lambda x: x is None,
    )


def _zero_cotangent(tree: PyTree) -> PyTree:
    """Zeros for the inexact arrays of `tree`, None elsewhere."""
    return jax.tree_util.tree_map(
        lambda x: jnp.zeros_like(x) if eqx.is_inexact_array(x) else None, tree
    )


class _Steps(eqx.Module):
    """The recorded run: its step ends `grid` (padded with +inf), their number `n`, and the
    step function on it, as functions of the problem's differentiated arrays `diff` (the
    rest, `rest`, held: the backward loops then carry the cotangents of those alone)."""

    grid: Array
    n: Array
    rest: PyTree
    prepare: Prepare = eqx.field(static=True)

    def integration(self, diff) -> Integration:
        """The problem's pieces (`Prepare`) from its differentiated arrays."""
        return self.prepare(eqx.combine(diff, self.rest))

    def times(self, diff, k) -> tuple[Array, Array]:
        """Step k's (start, end): t0 for the first start, t1 for the last end where the run
        reached t1 (so that their derivatives pass), the recorded times elsewhere."""
        it = self.integration(diff)
        start = jnp.where(k == 0, it.t0, self.grid[jnp.maximum(k - 1, 0)])
        end_at_t1 = (k == self.n - 1) & (self.grid[k] == it.t1)
        return start, jnp.where(end_at_t1, it.t1, self.grid[k])

    def start(self, diff) -> PyTree:
        """s₀ = (y₀, σ₀): the initial state and the solver's initial state."""
        it = self.integration(diff)
        first_end = jnp.minimum(self.grid[0], it.t1)
        return it.y0, it.solver.init(it.terms, it.t0, first_end, it.y0, it.args)

    def step(self, diff, k, s) -> tuple[PyTree, tuple]:
        """s_{k+1} and step k's dense output (info, start, end)."""
        it = self.integration(diff)
        start, end = self.times(diff, k)
        y, state = s
        y1, _, dense, state1, _ = it.solver.step(it.terms, start, end, y, it.args, state, False)
        return (y1, state1), (dense, start, end)

    def output(self, diff, dense, start, end, tau) -> PyTree:
        """The dense output of a step at time tau."""
        interpolation = self.integration(diff).solver.interpolation_cls
        return interpolation(t0=start, t1=end, **dense).evaluate(tau)


def _output_cotangents(steps: _Steps, diff, dense, start, end, saved_bar, tau_bar, first, last):
    """Σ_j vjp of step k's dense output at the output times τ_first … τ_{last−1}: the
    cotangents of the dense information and of the step's start and end, and `tau_bar`
    with those of the τ_j added."""
    saveat = steps.integration(diff).saveat
    zero = (_zero_cotangent(dense), jnp.zeros_like(start), jnp.zeros_like(end))

    def body(j, carry):
        bars, tau_bar = carry
        _, pullback = eqx.filter_vjp(
            lambda d, a, b, tau: steps.output(diff, d, a, b, tau), dense, start, end, saveat[j]
        )
        ybar = jax.tree_util.tree_map(lambda c: c[j], saved_bar)
        d_bar, a_bar, b_bar, t_bar = pullback(ybar)
        return _add(bars, (d_bar, a_bar, b_bar)), tau_bar.at[j].add(t_bar)

    return jax.lax.fori_loop(first, last, body, (zero, tau_bar))


def _terminal_cotangents(cotangent, it: Integration, grid: Array) -> tuple:
    """From the solve's output cotangent: ȳ of the final state (the first `SubSaveAt`) and
    of its time, and, with output times τ, the saved states' ȳ_j, zeros for τ̄ and the step
    owning each output (the first step whose end is ≥ τ_j); None without output times."""
    final_bar = jax.tree_util.tree_map(
        lambda c: c[0], _zeros_for_none(cotangent.ys[0], jax.tree_util.tree_map(
            lambda y: jnp.zeros((1, *jnp.shape(y)), jnp.result_type(y)), it.y0))
    )  # fmt: skip
    t_final_bar = jnp.zeros_like(it.t0) if cotangent.ts[0] is None else cotangent.ts[0][0]
    if it.saveat is None:
        return final_bar, t_final_bar, None, jnp.zeros((0,), grid.dtype), None
    saved_bar = _zeros_for_none(
        cotangent.ys[1],
        jax.tree_util.tree_map(
            lambda y: jnp.zeros((it.saveat.shape[0], *jnp.shape(y)), jnp.result_type(y)), it.y0
        ),
    )
    owner = jnp.searchsorted(grid, it.saveat, side="left")
    return final_bar, t_final_bar, saved_bar, jnp.zeros_like(it.saveat), owner


@adjoint_solve.def_bwd
def _adjoint_bwd(residuals, cotangent, perturbed, problem, run: Run, prepare: Prepare, segment):
    del run
    grid, n = residuals
    diff, rest = eqx.partition(problem, perturbed)
    steps = _Steps(grid, n, rest, prepare)
    it = prepare(problem)
    max_steps = grid.shape[0]
    count = -(-max_steps // segment)

    s0 = steps.start(diff)
    final_bar, t_final_bar, saved_bar, tau_bar, owner = _terminal_cotangents(cotangent, it, grid)
    s_bar = (final_bar, _zero_cotangent(s0[1]))
    segments = (n + segment - 1) // segment

    def visit_step(i, carry):
        """Step i of a visit to the segment of steps first … last − 1 (`count` of them):
        for i < count the step k = first + i forward, keeping s_k in the buffer; then step
        k = last − 1 − (i − count) in reverse, from the buffer: ā_k from ā_{k+1} and the
        cotangents of its outputs. Both by one vjp of the step (its forward pass gives
        s_{k+1}; its pullback runs in reverse only), so the program holds the step once."""
        first, last, s, s_bar, diff_bar, tau_bar, buffer = carry
        count = last - first
        forward = i < count
        k = jnp.where(forward, first + i, last - 1 - (i - count))
        s_k = jax.tree_util.tree_map(lambda x, b: jnp.where(forward, x, b[k - first]), s, buffer)
        buffer = jax.tree_util.tree_map(lambda b, x: b.at[k - first].set(x), buffer, s_k)
        (s_next, (dense, start, end)), pullback = eqx.filter_vjp(
            lambda d, s_: steps.step(d, k, s_), diff, s_k
        )
        s = jax.tree_util.tree_map(lambda x, y: jnp.where(forward, x, y), s_next, s)

        def sweep(bars):
            s_bar, diff_bar, tau_bar = bars
            if saved_bar is None:
                out_bars = (_zero_cotangent(dense), jnp.zeros_like(start), jnp.zeros_like(end))
            else:
                # Step k's outputs: τ_first … τ_{last−1}.
                lo, hi = jnp.searchsorted(owner, jnp.stack([k, k + 1]), side="left")
                out_bars, tau_bar = _output_cotangents(
                    steps, diff, dense, start, end, saved_bar, tau_bar, lo, hi
                )
            d_bar, start_bar, end_bar = out_bars
            end_bar = end_bar + jnp.where(k == n - 1, t_final_bar, 0.0)
            step_bar, s_bar = pullback((s_bar, (d_bar, start_bar, end_bar)))
            return s_bar, _add(diff_bar, step_bar), tau_bar

        bars = jax.lax.cond(forward, lambda b: b, sweep, (s_bar, diff_bar, tau_bar))
        return first, last, s, *bars, buffer

    def visit(carry):
        """Visit v of 2S − 1 (S segments): segments 0 … S−1 forward, keeping each one's
        first state, then S−2 … 0 from those checkpoints; each visit recomputes its
        segment's states (`visit_step`), and from the last forward visit on sweeps them in
        reverse."""
        v, s, checkpoints, s_bar, diff_bar, tau_bar, buffer = carry
        forward = v < segments
        index = jnp.where(forward, v, 2 * segments - 2 - v)
        first = index * segment
        last = jnp.minimum(first + segment, n)
        s = jax.tree_util.tree_map(lambda x, c: jnp.where(forward, x, c[index]), s, checkpoints)
        checkpoints = jax.tree_util.tree_map(lambda c, x: c.at[index].set(x), checkpoints, s)
        steps_taken = (last - first) + jnp.where(v >= segments - 1, last - first, 0)
        _, _, s, s_bar, diff_bar, tau_bar, buffer = jax.lax.fori_loop(
            0, steps_taken, visit_step, (first, last, s, s_bar, diff_bar, tau_bar, buffer)
        )
        return v + 1, s, checkpoints, s_bar, diff_bar, tau_bar, buffer

    checkpoints = jax.tree_util.tree_map(lambda x: jnp.zeros((count, *x.shape), x.dtype), s0)
    buffer = jax.tree_util.tree_map(lambda x: jnp.zeros((segment, *x.shape), x.dtype), s0)
    _, _, _, s_bar, diff_bar, tau_bar, _ = jax.lax.while_loop(
        lambda carry: carry[0] < 2 * segments - 1,
        visit,
        (0, s0, checkpoints, s_bar, _zero_cotangent(diff), tau_bar, buffer),
    )
    _, pullback = eqx.filter_vjp(steps.start, diff)
    diff_bar = _add(diff_bar, pullback(s_bar)[0])
    if it.saveat is not None:  # the output times' own cotangents
        _, pullback = eqx.filter_vjp(lambda d: steps.integration(d).saveat, diff)
        diff_bar = _add(diff_bar, pullback(tau_bar)[0])
    return diff_bar
