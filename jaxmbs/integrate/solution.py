"""The result of a simulation: `Solution` and the result codes `RESULTS`."""

from __future__ import annotations

from typing import ClassVar

import diffrax
import equinox as eqx
import jax.numpy as jnp

from .._internal.types import Array


class RESULTS:
    """Result codes of a simulation (`Solution.result`), with their messages."""

    successful: ClassVar[int] = 0
    max_steps_reached: ClassVar[int] = 1
    singular_configuration: ClassVar[int] = 2
    step_failed: ClassVar[int] = 3
    inconsistent_initial_conditions: ClassVar[int] = 4
    messages: ClassVar[tuple[str, ...]] = (
        "",
        "jaxmbs.simulate: the maximum number of solver steps was reached; raise max_steps",
        "jaxmbs.simulate: singular configuration: the constraint Jacobian changed rank, or the "
        "formulation's fixed pivot block (coordinate partitioning: Φ_u) degenerated, during "
        "integration; the solution stops there",
        "jaxmbs.simulate: the solver failed (non-finite state or step size too small)",
        "jaxmbs.simulate: inconsistent initial conditions: |Φ(q0)| or |c(q0, q̇0)| exceeds "
        "consistency_tol (use jaxmbs.assemble), or q0, q̇0, a parameter or M(q0) is not finite",
    )

    @classmethod
    def message(cls, code: int) -> str:
        """Human-readable message for a result code (empty for success)."""
        return cls.messages[int(code)]


class Solution(eqx.Module):
    """A simulated trajectory at the output times (a pytree; batched under vmap).

    **Fields:**

    - `ts`: output times, shape (T,).
    - `q`, `qd`, `qdd`: coordinates, velocities, accelerations, shape (T, n).
    - `multipliers`: minimum-norm Lagrange multipliers λ, shape (T, m + h), with
      M q̈ + Cᵀλ = Q.
    - `position_residual`: max |Φ(q, t)| at each output time, shape (T,).
    - `velocity_residual`: max |c(t, q, q̇)| (holonomic Φ̇ and Pfaffian ψ), shape (T,).
    - `energy`: ½q̇ᵀMq̇ + V where the mechanism has a potential energy, else None.
    - `stats`: `num_steps`, `num_accepted_steps`, `num_rejected_steps`, `rhs_evaluations`.
    - `result`: a code of `jaxmbs.RESULTS` (0: successful). After a failure the outputs past
      the failure time are not finite.
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
    result: Array

    @property
    def successful(self) -> Array:
        """Whether the simulation succeeded (per sample when batched)."""
        return self.result == RESULTS.successful


def rhs_evaluations(solver: diffrax.AbstractSolver, num_steps: Array, auto_dt0: bool) -> Array:
    """RHS evaluations of an explicit Runge–Kutta solve, from its Butcher tableau.

    Per attempted step: the stages (one fewer with first-same-as-last); plus the first
    stage at start and the two evaluations of the initial step-size selection. −1 where
    the solver has no explicit tableau.
    """
    while isinstance(solver, diffrax.AbstractWrappedSolver):
        solver = solver.solver
    tableau = getattr(solver, "tableau", None)
    if not isinstance(tableau, diffrax.ButcherTableau) or tableau.implicit:
        return jnp.asarray(-1)
    stages = len(tableau.c) + 1
    per_step = stages - 1 if tableau.fsal else stages
    return per_step * num_steps + (1 if tableau.fsal else 0) + (2 if auto_dt0 else 0)


def result_code(diffrax_result, ok: Array) -> Array:
    """The jaxmbs result code from diffrax's result and the initial-state check `ok`."""
    code = jnp.where(
        diffrax_result == diffrax.RESULTS.successful,
        RESULTS.successful,
        jnp.where(
            diffrax_result == diffrax.RESULTS.max_steps_reached,
            RESULTS.max_steps_reached,
            jnp.where(
                diffrax_result == diffrax.RESULTS.event_occurred,
                RESULTS.singular_configuration,
                RESULTS.step_failed,
            ),
        ),
    )
    return jnp.where(ok, code, RESULTS.inconsistent_initial_conditions)
