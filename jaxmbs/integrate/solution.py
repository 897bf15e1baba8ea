"""The result of a simulation: `Solution`, its result codes `RESULTS`, `SimulationError`."""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Array


class RESULTS(eqx.Enumeration):
    """Why a simulation ended (`Solution.result`); each item's message names the cause.

    Compare with `==` (`sol.result == jaxmbs.RESULTS.successful`, elementwise in a batch);
    `jaxmbs.RESULTS[item]` is the message.
    """

    successful = ""
    max_steps_reached = "the maximum number of solver steps was reached before t1; raise max_steps"
    singular_configuration = (
        "singular configuration: the constraint Jacobian lost rank (a lock, a toggle or a "
        "branch point), or the integrated coordinates degenerated (coordinate partitioning: "
        "C_D singular; closing conditions: the active variant's singularity); the motion "
        "cannot be continued there"
    )
    step_failed = (
        "a step failed: non-finite forces or state (NaN or inf from the model functions), "
        "the step size collapsed away from any singular configuration, or the generalized-α "
        "Newton iteration did not converge (jaxmbs.GeneralizedAlpha: a shorter step, or more "
        "max_iterations)"
    )
    inconsistent_initial_conditions = (
        "inconsistent initial conditions: |Φ(q0)| or |c(q0, q̇0)| exceeds consistency_tol "
        "(use jaxmbs.assemble), or q0, q̇0, a parameter or M(q0) is not finite, or M(q0) is "
        "not positive definite"
    )
    mass_matrix_invalid = (
        "the mass matrix M(q) lost symmetry or positive definiteness during the motion (checked "
        "at the output times and where the run ended; check mass_matrix and the parameters)"
    )
    event_not_finite = "the event's condition function returned NaN or inf"


#: The result names in the order of their indices (`result_index`, `jaxmbs.monte_carlo`).
RESULT_NAMES: tuple[str, ...] = (
    "successful",
    "max_steps_reached",
    "singular_configuration",
    "step_failed",
    "inconsistent_initial_conditions",
    "mass_matrix_invalid",
    "event_not_finite",
)


def result_index(result: RESULTS) -> Array:
    """The index of a result (per sample when batched) in `RESULT_NAMES`, an integer array."""
    conditions = [result == getattr(RESULTS, name) for name in RESULT_NAMES]
    return jnp.select(conditions, list(range(len(RESULT_NAMES))), -1).astype(jnp.int32)


class SimulationError(RuntimeError):
    """A simulation failed (`throw=True` outside `jax.jit`): the first line of the message is
    the cause and the time it happened. Under `jax.jit` the same cause is raised as equinox's
    runtime error; with `throw=False` it is `Solution.result`."""


class Solution(eqx.Module):
    """A simulated trajectory at the output times (a pytree; batched under vmap).

    **Fields:**

    - `ts`: the requested output times, shape (T,) (also those past a failure, whose
      values are NaN).
    - `q`, `qd`, `qdd`: coordinates, velocities, accelerations, shape (T, n).
    - `multipliers`: minimum-norm Lagrange multipliers λ, shape (T, m + h), with
      M q̈ + Cᵀλ = Q.
    - `position_residual`: max |Φ(q, t)| at each output time, shape (T,).
    - `velocity_residual`: max |c(t, q, q̇)| (holonomic Φ̇ and Pfaffian ψ), shape (T,).
    - `energy`: ½q̇ᵀMq̇ + V where the mechanism has a potential energy, else None.
    - `stats`: `num_steps`, `num_accepted_steps`, `num_rejected_steps`, `rhs_evaluations`,
      and what the method adds (`num_switches`, …).
    - `result`: a `jaxmbs.RESULTS` item. After a failure every output past `t_final` is NaN
      (and so is a gradient through it); with `saveat=None` the one output at t1 is NaN.
    - `t_final`: the time the integration stopped: t1, the time of an event, the last
      time reached before a failure, the first output time where M(q) was invalid, or t0
      for initial conditions that never started. An event located by its root finder has
      the root's derivative; the time a failure condition was detected (a step's end, not a
      located root) has a NaN derivative by rule (a loss that reads it has a NaN gradient);
      a boolean event's time (a step's end) differentiates as 0.
    - `event`: which condition of the user's `event` stopped the run (its index among the
      event's `cond_fn` leaves), −1 if none did.
    - `method`: the name of the method that ran.
    """

    ts: Array
    q: Array
    qd: Array
    qdd: Array
    multipliers: Array
    position_residual: Array
    velocity_residual: Array
    energy: Array | None
    stats: dict[str, Array]
    result: RESULTS
    t_final: Array
    event: Array
    method: str = eqx.field(static=True, default="")

    @property
    def successful(self) -> Array:
        """Whether the simulation succeeded (per sample when batched)."""
        return self.result == RESULTS.successful


def raise_on_failure(solution: Solution) -> Solution:
    """Raise when `solution` failed: a `SimulationError` naming the cause and its time when
    the result is concrete; else (under `jit`) equinox's runtime error with the cause."""
    result = solution.result
    failed = result != RESULTS.successful
    if isinstance(failed, jax.core.Tracer):
        return result.error_if(solution, failed)
    if bool(np.any(failed)):
        # Under jax.grad the time is a tracer of a concrete value: its value, not its tangent.
        t_final = float(jax.lax.stop_gradient(solution.t_final))
        raise SimulationError(f"jaxmbs.simulate: {RESULTS[result]} (t = {t_final:.10g})")
    return solution


def rhs_evaluations(solver: diffrax.AbstractSolver, num_steps: Array, auto_dt0: bool) -> Array:
    """RHS evaluations of an explicit Runge–Kutta solve, from its Butcher tableau.

    Per attempted step: the stages (one fewer with first-same-as-last); plus the first
    stage at start and the two evaluations of the initial step-size selection. −1 where
    the solver has no explicit tableau.
    """
    tableau = explicit_tableau(solver)
    if tableau is None:
        return jnp.asarray(-1)
    stages = len(tableau.c) + 1
    per_step = stages - 1 if tableau.fsal else stages
    return per_step * num_steps + (1 if tableau.fsal else 0) + (2 if auto_dt0 else 0)


def explicit_tableau(solver: diffrax.AbstractSolver) -> diffrax.ButcherTableau | None:
    """The Butcher tableau of an explicit Runge–Kutta solver inside any wrappers, else None."""
    while isinstance(solver, diffrax.AbstractWrappedSolver):
        solver = solver.solver
    tableau = getattr(solver, "tableau", None)
    if not isinstance(tableau, diffrax.ButcherTableau) or tableau.implicit:
        return None
    return tableau
