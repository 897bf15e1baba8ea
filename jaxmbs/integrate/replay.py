"""Reverse mode through an adaptive solve, on the forward run's own steps.

**Why.** diffrax's checkpointed adjoint stores the solver's state at a few steps and, in the
backward pass, recomputes the steps between them. That recomputation is compiled as part of
the derivative program, and XLA may fuse and order its floating-point operations
differently from the forward run's, so its values can differ in the last bits. The step's
error estimate Σ (bⱼ − b̂ⱼ) kⱼ is a difference of nearly equal stage sums: a last-bit change
of the stages shifts it by ~1e-6 relative at tight tolerances, and with it the next step
size. The recomputed steps drift away from the forward run's, until an accept/reject
decision flips; from there the backward pass carries the cotangents of one run through the
steps of another. Measured on a two-body quarter car over 1.5 s of rough road (3587 steps,
1261 rejected, rtol = atol = 1e-10): the recomputed step times were 4e-12 off the forward
run's six steps after a restart and up to 3e-4 off later, and reverse mode's gradient
differed from forward mode's by 48 % in one component. A smooth right-hand side whose
recomputation happens to be bitwise identical hides the defect.

**What this computes instead.** diffrax's PID controller stops gradients through its
decisions, so the derivative of an adaptive solve is the derivative of the integration on
its accepted grid t₀ < t₁ < … < t_N. `replayed` takes that literally: the forward pass is the
adaptive solve, which also records t₁, …, t_N (`SubSaveAt(steps=True)`); the backward pass
differentiates a second solve that steps to exactly those times (`StepReplay`), with the
checkpointed adjoint. Its recomputations take the same steps whatever their rounding. The
replay leaves out the conditions that end a run as a failure (the rank check, a singular
partition): they decide nothing once the steps are given, and a run they stopped ends the
replay at its last recorded step, past which every output and its gradient is NaN. The
user's events stay, so that the derivative of an event's time is the recorded run's. The
cost: one more forward solve, over the accepted steps only, and `max_steps` recorded times.
Forward mode (`jax.jvp`, `jax.jacfwd`) does not come here: `simulate` integrates the tangents
along with the run (`diffrax.ForwardMode`).
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from .._internal.types import Array, PyTree

# `run(inputs, controller, record_steps) -> diffrax.Solution`: the solve of `inputs` with the
# given step-size controller (None: the inputs' own), whose last `SubSaveAt` records the
# accepted steps' end times when `record_steps` is True.
Run = Callable[[PyTree, "StepReplay | None", bool], diffrax.Solution]


class StepReplay(diffrax.AbstractAdaptiveStepSizeController):
    """Steps to the recorded end times `grid` of an earlier run's accepted steps, accepting
    every step; `grid` is padded past the last recorded step with +inf (clipped to t1).

    Adaptive in diffrax's sense only for its tolerances `rtol`, `atol`, `norm`: an implicit
    solver's root finder takes them from the step-size controller when it has none of its
    own, as it took them from the recorded run's (`with_tolerances`)."""

    grid: Array
    rtol: Array | float = 0.0
    atol: Array | float = 0.0
    norm: Callable[[PyTree], Array] = optx.rms_norm

    def with_tolerances(self, recorded: diffrax.AbstractStepSizeController) -> StepReplay:
        """This replay with the tolerances of the recorded run's controller, if it has any."""
        if not isinstance(recorded, diffrax.AbstractAdaptiveStepSizeController):
            return self
        return StepReplay(self.grid, recorded.rtol, recorded.atol, recorded.norm)

    def end(self, t0: Array, t1: Array) -> Array:
        """Where the replay ends: at the recorded run's last step if that ended before t1
        (stopped by an event or a failure), else at t1 itself (so that a derivative with
        respect to t1 passes). Output times beyond it must be clipped to it."""
        last = jnp.max(jnp.where(jnp.isfinite(self.grid), self.grid, t0))
        return jnp.where((last < t1) & (last > t0), last, t1)

    def wrap(self, direction):
        return self

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        return jnp.minimum(self.grid[0], t1), (jnp.asarray(1), t1)

    def adapt_step_size(
        self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state
    ):
        index, end = controller_state
        next_t1 = jnp.minimum(self.grid[jnp.minimum(index, self.grid.shape[0] - 1)], end)
        return True, t1, next_t1, False, (index + 1, end), diffrax.RESULTS.successful


def _without_steps(out: diffrax.Solution) -> diffrax.Solution:
    """The solution without its last `SubSaveAt` (the recorded steps)."""
    return eqx.tree_at(lambda s: (s.ts, s.ys), out, (out.ts[:-1], out.ys[:-1]))


@eqx.filter_custom_vjp
def replayed(inputs: PyTree, run: Run) -> diffrax.Solution:
    """`run(inputs, None, False)`, differentiated in reverse mode on its own accepted steps
    (module notes). `run` must build everything from `inputs` (no closed-over arrays)."""
    return run(inputs, None, False)


@replayed.def_fwd
def _replayed_fwd(perturbed, inputs: PyTree, run: Run):
    del perturbed
    out = run(inputs, None, True)
    return _without_steps(out), out.ts[-1]


@replayed.def_bwd
def _replayed_bwd(grid: Array, cotangent, perturbed, inputs: PyTree, run: Run):
    del perturbed
    out, pullback = eqx.filter_vjp(lambda x: run(x, StepReplay(grid), False), inputs)
    # Only the saved times and states carry cotangents into the replay: its events are not
    # the recorded run's (module notes). A None cotangent is a zero.
    zeros = jax.tree_util.tree_map(
        lambda o: jnp.zeros_like(o) if eqx.is_inexact_array(o) else None, out
    )
    saved = jax.tree_util.tree_map(
        lambda c, z: z if c is None else c,
        (cotangent.ts, cotangent.ys),
        (zeros.ts, zeros.ys),
        is_leaf=lambda x: x is None,
    )
    cotangent = eqx.tree_at(lambda s: (s.ts, s.ys), zeros, saved, is_leaf=lambda x: x is None)
    return pullback(cotangent)[0]
