"""Switching the independent coordinates between integration steps.

Shared by the coordinate-partitioning integrator (`jaxmbs.simulate_partitioned`) and the
closing-condition integrator (`jaxmbs.simulate_closing`). Both integrate a state whose meaning
depends on a discrete choice (which coordinates are independent; which closing-condition
variant is active). Shapes are static in JAX, so the choice is *data*: it is stored in the
ODE state as a float component with zero time derivative, and changed only between steps:

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
  re-expression is differentiable, so gradients through runs that switch are exact derivatives
  of the computed trajectory.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from ._types import Array
from .formulations import expand_multipliers
from .integrate import RESULTS, _rhs_evaluations
from .kinematics import constraint_jacobian, position_residual, velocity_residual
from .structure import Structure


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


class SwitchingSolver(diffrax.AbstractWrappedSolver):
    """A diffrax solver that may re-express its state in other coordinates after each step.

    `switch(t1, y1, args) -> (y1', switched)` maps the end state of a step to its (possibly
    re-expressed) form. The solver state carries whether the last accepted step switched, so
    that the next step re-evaluates its first stage, and the number of switches.
    """

    solver: diffrax.AbstractSolver
    switch: Callable  # a Module holding the mechanism: equal instances reuse compilations

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        inner = self.solver.init(terms, t0, t1, y0, args)
        return inner, jnp.zeros((), bool), jnp.zeros((), jnp.int32)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        inner, switched, count = solver_state
        y1, y_error, dense_info, inner, result = self.solver.step(
            terms, t0, t1, y0, args, inner, made_jump | switched
        )
        y1, switched = self.switch(t1, y1, args)
        count = count + switched.astype(count.dtype)
        return y1, y_error, dense_info, (inner, switched, count), result

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


def state_norm(y) -> Array:
    """RMS norm over the integrated components (positions, velocities) only.

    The remaining components of the state (the current choice of coordinates) never change
    within a step; counting them would dilute the error estimate.
    """
    return optx.rms_norm((y[0], y[1]))


def rhs_evaluations(solver: diffrax.AbstractSolver, num_steps: Array, auto_dt0: bool, num_switches):
    """RHS evaluations of an explicit Runge–Kutta solve, with one more per switch for a
    first-same-as-last method (its stored stage is re-evaluated). −1 without a tableau."""
    base = _rhs_evaluations(solver, num_steps, auto_dt0)
    while isinstance(solver, diffrax.AbstractWrappedSolver):
        solver = solver.solver
    tableau = getattr(solver, "tableau", None)
    fsal = isinstance(tableau, diffrax.ButcherTableau) and tableau.fsal
    return jnp.where(base < 0, base, base + (num_switches if fsal else 0))


def physical_outputs(mechanism, structure: Structure, t, q, qd, qdd, params):
    """Multipliers, residuals and energy at one output state with known accelerations.

    λ is the minimum-norm solution of C_Iᵀ λ_I = Q − M q̈ (M q̈ + Cᵀλ = Q), expanded over
    redundant rows.
    """
    Q = mechanism.forces(t, q, qd, params)
    M = mechanism.mass_matrix(q, params)
    C = constraint_jacobian(mechanism, t, q, params)
    if structure.rank:
        C_i = C[jnp.asarray(structure.independent_rows)]
        lam_ind = jnp.linalg.solve(C_i @ C_i.T, C_i @ (Q - M @ qdd))
        lam = expand_multipliers(C, lam_ind, structure)
    else:
        lam = jnp.zeros((C.shape[0],), q.dtype)
    phi = position_residual(mechanism, t, q, params)
    c = velocity_residual(mechanism, t, q, qd, params)
    energy = mechanism.energy(q, qd, params) if mechanism.potential_energy is not None else None
    return (
        lam,
        jnp.max(jnp.abs(phi), initial=0.0),
        jnp.max(jnp.abs(c), initial=0.0),
        energy,
    )


def finish_code(code: Array, throw: Array, singular_message: str) -> Array:
    """Raise on failure when `throw` (a traced flag: one compilation serves both settings),
    with a specific message for a singular choice of coordinates."""
    messages = list(RESULTS.messages)
    messages[RESULTS.singular_configuration] = singular_message
    failed = throw & (code != RESULTS.successful)
    return eqx.branched_error_if(code, failed, code, tuple(messages))


def cast_params(params, dtype):
    """Parameters as arrays of the state's dtype: traced, never baked into the compile."""
    return jax.tree_util.tree_map(
        lambda x: x if isinstance(x, jax.Array) else jnp.asarray(x, dtype), params
    )
