"""Switching the independent coordinates between integration steps.

Shared by the state spaces of coordinate partitioning (`PartitionedCoordinates`,
`method="partitioned"`) and of closing conditions (`ClosingConditions`). Both integrate a
state whose meaning depends on a discrete choice (which coordinates are independent; which
closing-condition variant is active). Shapes are static in JAX, so the choice is *data*: it
is stored in the ODE state as a float component with zero time derivative, and changed only
between steps:

- `SwitchingSolver` wraps a diffrax solver. After each step it re-evaluates the choice at
  the new state and, when `Switching` says so, re-expresses the same physical state (q, q̇)
  in the new independent coordinates. Nothing is lost at the switch: the representation
  changes, the state does not (Blajer, Schiehlen, Schirm 1994, §4 after eq 29; 1993, §3).
- A rejected step discards the switch with the rest of the step. After an accepted switch the
  next step re-evaluates its first stage (`made_jump`), because a first-same-as-last stage
  stored by the solver belongs to the old representation.
- The error estimate of the step (made in the old representation) drives step-size control
  as usual; the choice component is left out of the error norm.
- Under `jax.grad` the decision is piecewise constant (no gradient flows through it) while the
  re-expression is differentiable, so a gradient is the derivative of the computed trajectory
  for its sequence of choices, which the switch leaves physically continuous.

Why between steps: choosing the partition at every right-hand-side evaluation would change
the meaning of v_I inside a Runge–Kutta step, and stopping at a terminating event to restart
diffrax needs a loop over a bounded number of solves and splices their outputs. Switching at
step boundaries keeps one solve, one compiled loop, dense output within every step, and
step-size control across the switch.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import optimistix as optx

from .._internal.types import Array, Params
from ..kinematics import algebra
from ..kinematics.constraints import constraint_jacobian
from .solvers import DelegatingSolver, rejected_unless
from .state_space import AbstractStateSpace


class Switching(eqx.Module):
    """When to change the independent coordinates during integration.

    The quality of a set of independent coordinates is the set criterion κ of
    `jaxmbs.partition_criterion` (for one independent coordinate: its projective criterion
    cos²α, Blajer et al. 1994, eq 23a). After each step the integrator switches to the best
    set when

        κ(current) < threshold    or    κ(best) > ratio · κ(current).

    **Arguments:**

    - `enabled`: switch at all (False: keep the initial choice and stop with
      `RESULTS.singular_configuration` when it becomes singular).
    - `threshold`: κ below which the current set is abandoned for any better one.
    - `ratio`: how much better (> 1) another set must be to replace a still acceptable one;
      the hysteresis keeps two near-equal sets from alternating at every step.
    - `singular_tol`: κ below which the current set is declared singular (the run stops with
      `RESULTS.singular_configuration`; never reached while switching works).

    The fields are stored as arrays, so runs with different settings share one compilation.
    """

    enabled: Array
    threshold: Array
    ratio: Array
    singular_tol: Array

    def __init__(
        self,
        enabled: bool = True,
        threshold: float = 0.05,
        ratio: float = 2.0,
        singular_tol: float = 1e-6,
    ):
        if not 0.0 <= singular_tol < 1.0:
            raise ValueError(f"singular_tol must lie in [0, 1), got {singular_tol}")
        if not ratio > 1.0:
            raise ValueError(f"ratio must exceed 1 (hysteresis), got {ratio}")
        if not singular_tol <= threshold:
            raise ValueError(f"threshold ({threshold}) must not be below singular_tol")
        self.enabled = jnp.asarray(bool(enabled))
        self.threshold = jnp.asarray(float(threshold))
        self.ratio = jnp.asarray(float(ratio))
        self.singular_tol = jnp.asarray(float(singular_tol))

    def decide(self, current: Array, best: Array, differs: Array) -> Array:
        """Whether to leave the current set (criterion `current`) for the best (`best`)."""
        better = (current < self.threshold) | (best > self.ratio * current)
        return self.enabled & differs & better


def get_switching(switching: bool | Switching) -> Switching:
    """`True` / `False` / a `Switching` instance → a `Switching` instance."""
    if isinstance(switching, Switching):
        return switching
    if isinstance(switching, bool):
        return Switching(enabled=switching)
    raise ValueError(f"switching must be a bool or a jaxmbs.Switching, got {switching!r}")


class SwitchingSolver(DelegatingSolver):
    """A diffrax solver that may re-express its state in other coordinates after each step.

    `switch(t1, y1, args) -> (y1', switched)` maps the end state of a step to its (possibly
    re-expressed) form, after the stabilisation's `project(t1, y1, args) -> (y1, holds)`
    where there is one (a step whose projection does not hold is rejected)
    (one wrapper, not a `ProjectedSolver` inside: diffrax forwards `isinstance` checks, e.g.
    for an implicit solver, through one level of wrapping only). The solver state carries
    whether the last accepted step switched, so that the next step re-evaluates its first
    stage, and the number of switches.
    """

    switch: Callable  # a Module holding the mechanism: equal instances reuse compilations
    project: Callable | None = None  # applied to the end state before `switch`

    def init(self, terms, t0, t1, y0, args):
        inner = self.solver.init(terms, t0, t1, y0, args)
        return inner, jnp.zeros((), bool), jnp.zeros((), jnp.int32)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        inner, switched, count = solver_state
        y1, y_error, dense_info, inner, result = self.solver.step(
            terms, t0, t1, y0, args, inner, made_jump | switched
        )
        if self.project is not None:
            y1, holds = self.project(t1, y1, args)
            y_error = rejected_unless(holds, y_error)
        y1, switched = self.switch(t1, y1, args)
        count = count + switched.astype(count.dtype)
        return y1, y_error, dense_info, (inner, switched, count), result


class AbstractSwitchingStateSpace(AbstractStateSpace):
    """A state space whose state is (coordinates, velocities, choice, …): the choice (the
    independent coordinates, the closing-condition variant) is changed between steps by a
    `SwitchingSolver` under a `Switching` rule."""

    switching: eqx.AbstractVar[Switching]

    def error_norm(self, y) -> Array:
        """RMS norm over the integrated components (coordinates, velocities) only: the choice
        never changes within a step, and counting it would dilute the error estimate."""
        return optx.rms_norm((y[0], y[1]))

    def statistics(self, ys, solver_state) -> dict[str, Array]:
        """The number of switches (the `SwitchingSolver`'s count)."""
        return {"num_switches": solver_state[2]}

    def restarted_stages(self, solver_state) -> Array:
        """One first-same-as-last stage per switch."""
        return solver_state[2]


def multipliers_from_accelerations(
    mechanism, q: Array, qd: Array, qdd: Array, t, params: Params
) -> Array:
    """Minimum-norm λ with M q̈ + Cᵀλ = Q at a state whose accelerations are known: the
    least-squares solution of C_Iᵀ λ_I = Q − M q̈, expanded over redundant rows."""
    Q = mechanism.forces(t, q, qd, params)
    M = algebra.mass_matrix(mechanism, q, params)
    C = constraint_jacobian(mechanism, q, t, params)
    return mechanism.structure.reaction_multipliers(C, Q - M @ qdd)
