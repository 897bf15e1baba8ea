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

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from .._internal.checks import is_concrete
from .._internal.types import Array, ArrayLike, Params
from ..formulations import expand_multipliers
from ..kinematics.constraints import constraint_jacobian, position_residual, velocity_residual
from ..kinematics.structure import Structure, resolve_structure
from ..model import inertia
from .inputs import check_inputs, initial_checks, raise_if_invalid
from .solution import RESULTS, Solution, result_code, rhs_evaluations
from .solvers import DelegatingSolver


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
    re-expressed) form. The solver state carries whether the last accepted step switched, so
    that the next step re-evaluates its first stage, and the number of switches.
    """

    switch: Callable  # a Module holding the mechanism: equal instances reuse compilations

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


def state_norm(y) -> Array:
    """RMS norm over the integrated components (positions, velocities) only.

    The remaining components of the state (the current choice of coordinates) never change
    within a step; counting them would dilute the error estimate.
    """
    return optx.rms_norm((y[0], y[1]))


def physical_outputs(mechanism, structure: Structure, t, q, qd, qdd, params):
    """Multipliers, residuals and energy at one output state with known accelerations.

    λ is the minimum-norm solution of C_Iᵀ λ_I = Q − M q̈ (M q̈ + Cᵀλ = Q), expanded over
    redundant rows.
    """
    Q = mechanism.forces(t, q, qd, params)
    M = inertia.mass_matrix(mechanism, q, params)
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


class SwitchingOptions(eqx.Module):
    """Integration settings shared by the switching integrators (static where compiled in)."""

    switching: Switching
    solver: diffrax.AbstractSolver
    adjoint: diffrax.AbstractAdjoint
    progress_meter: diffrax.AbstractProgressMeter
    rtol: Array  # traced, as in `jaxmbs.simulate`: other tolerances reuse the compilation
    atol: Array
    dt0: float | None = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    consistency_tol: float = eqx.field(static=True)
    throw: Array  # traced: raising or not needs no recompilation

    def __init__(
        self,
        switching: bool | Switching,
        solver: diffrax.AbstractSolver | None,
        adjoint: diffrax.AbstractAdjoint | None,
        progress_meter: diffrax.AbstractProgressMeter | None,
        rtol: float,
        atol: float,
        dt0: float | None,
        max_steps: int,
        consistency_tol: float,
        throw: bool,
    ):
        self.switching = get_switching(switching)
        self.solver = diffrax.Tsit5() if solver is None else solver
        self.adjoint = diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint
        self.progress_meter = (
            diffrax.NoProgressMeter() if progress_meter is None else progress_meter
        )
        self.rtol, self.atol, self.dt0 = jnp.asarray(rtol), jnp.asarray(atol), dt0
        self.max_steps, self.consistency_tol = max_steps, consistency_tol
        self.throw = jnp.asarray(bool(throw))


def prepare(mechanism, q0: ArrayLike, qd0: ArrayLike, t_span, saveat, params: Params | None,
            consistency_tol: float, throw: bool):  # fmt: skip
    """Checked inputs, traced parameters and the static structure (as `jaxmbs.simulate`).

    **Returns:** `(mechanism with params, structure, q0, qd0, t0, t1, saveat)`; raises at once
    for a concrete inconsistent initial state when `throw`.
    """
    q0, qd0, t0, t1, saveat = check_inputs(mechanism, q0, qd0, t_span, saveat)
    params = jax.tree_util.tree_map(
        lambda x: x if isinstance(x, jax.Array) else jnp.asarray(x, q0.dtype),
        mechanism.params if params is None else params,
    )
    mechanism = mechanism.replace_params(params)
    structure = resolve_structure(mechanism, q0, t0)
    if throw and is_concrete(q0, qd0, t0, params):
        check = eqx.filter_jit(initial_checks)(mechanism, t0, q0, qd0, params, consistency_tol)
        raise_if_invalid(check, consistency_tol)
    return mechanism, structure, q0, qd0, t0, t1, saveat


def initial_validity(mechanism, t0, q0, qd0, options: SwitchingOptions):
    """(valid, q0, q̇0): an invalid initial state is zeroed and frozen (see `simulate`)."""
    ok = initial_checks(mechanism, t0, q0, qd0, mechanism.params, options.consistency_tol)["ok"]
    return ok, jnp.where(ok, q0, 0.0), jnp.where(ok, qd0, 0.0)


def integrate(vector_field, solver, t0, t1, y0, args, saveat, options: SwitchingOptions, event):
    """diffeqsolve with the switching solver; the final solver state is kept (switch count)."""
    save = diffrax.SaveAt(t1=True) if saveat is None else diffrax.SaveAt(ts=saveat)
    return diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field),
        solver,
        t0,
        t1,
        options.dt0,
        y0,
        args=args,
        saveat=eqx.tree_at(lambda s: s.solver_state, save, True),
        stepsize_controller=diffrax.PIDController(
            rtol=options.rtol, atol=options.atol, norm=state_norm
        ),
        max_steps=options.max_steps,
        adjoint=options.adjoint,
        event=event,
        progress_meter=options.progress_meter,
        throw=False,
    )


def make_solution(out, solver, options: SwitchingOptions, ok, outputs, singular_message: str,
                  **extra_stats) -> Solution:  # fmt: skip
    """A `jaxmbs.Solution` from a switching solve and its outputs at the saved times.

    `outputs` = (q, q̇, q̈, λ, max|Φ|, max|c|, energy), each with a leading time axis.
    """
    q, qd, qdd, lam, res_phi, res_c, energy = outputs
    num_switches = out.solver_state[2]
    num_steps = out.stats["num_steps"]
    # One more RHS evaluation per switch for a first-same-as-last method (its stored stage
    # belongs to the old representation and is re-evaluated).
    base = rhs_evaluations(solver, num_steps, options.dt0 is None)
    inner = solver
    while isinstance(inner, diffrax.AbstractWrappedSolver):
        inner = inner.solver
    tableau = getattr(inner, "tableau", None)
    fsal = isinstance(tableau, diffrax.ButcherTableau) and tableau.fsal
    stats = {
        "num_steps": num_steps,
        "num_accepted_steps": out.stats["num_accepted_steps"],
        "num_rejected_steps": out.stats["num_rejected_steps"],
        "rhs_evaluations": jnp.where(base < 0, base, base + (num_switches if fsal else 0)),
        "num_switches": num_switches,
        **extra_stats,
    }
    code = finish_code(result_code(out.result, ok), options.throw, singular_message)
    return Solution(
        ts=out.ts,
        q=jnp.where(ok, q, jnp.nan),
        qd=jnp.where(ok, qd, jnp.nan),
        qdd=qdd,
        multipliers=lam,
        position_residual=res_phi,
        velocity_residual=res_c,
        energy=energy,
        stats=stats,
        result=code,
    )


def finish_code(code: Array, throw: Array, singular_message: str) -> Array:
    """Raise on failure when `throw` (a traced flag: one compilation serves both settings),
    with a specific message for a singular choice of coordinates."""
    messages = list(RESULTS.messages)
    messages[RESULTS.singular_configuration] = singular_message
    failed = throw & (code != RESULTS.successful)
    return eqx.branched_error_if(code, failed, code, tuple(messages))
