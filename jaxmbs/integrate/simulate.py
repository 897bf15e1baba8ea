"""`simulate`: the one integration core — every method, option and failure goes through it.

The equations of motion (Pękal–Frączek 2016, eq 2.5) become an ODE in a state space
(`jaxmbs.integrate.state_space`): all of (q, q̇) with q̈ from a formulation, Blajer's
partitioned (q, v_I), or the minimal (q_I, v_I) of closing conditions. diffrax integrates it;
the core adds the stabilisation, the terminating events (rank of C, the state space's own
singular conditions, the user's event), the classification of failures, and the outputs
(q, q̇, q̈, λ, residuals, energy) at the output times. Everything is pure JAX: `simulate`
can be jit-ed, vmapped over q0, q̇0 and the parameters, and differentiated.

**How a failure is named.** After the solve:

- an internal event (C lost rank, the formulation's pivot block or the independent
  coordinates degenerated) → `singular_configuration` at the event's time;
- diffrax's step-size floor: the default controller (or a given `PIDController` without a
  floor) stops when a step would be shorter than `STEP_COLLAPSE` · (t1 − t0) (at least
  100 ε |t|). With the rank check on (`rank_rtol`, default 1e-8), a step size
  collapsing while C's independent rows are near rank loss, or M near singular (relative
  pivot of either below `COLLAPSE_PIVOT` at the last state reached), is a lock or toggle
  position, or the gimbal lock of Euler angles → `singular_configuration`; otherwise (a NaN
  force, a discontinuity, or any collapse without the rank check) → `step_failed`. A locking
  mechanism thus stops at its lock within a few hundred steps, not after `max_steps`;
- `max_steps_reached`; any other solver failure → `step_failed`;
- an initial state that is not finite or consistent → `inconsistent_initial_conditions`.

Every output after `t_final` (and the one output at t1 when `saveat=None`) of a failed run
is NaN, multiplied in so that gradients through it are NaN too; for a refused initial
state, so are those with respect to q0 and q̇0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.checks import is_concrete
from .._internal.compile import quick_jit
from .._internal.types import Array, ArrayLike, Params, PyTree
from ..formulations import AbstractFormulation, get_formulation
from ..formulations.closing import ClosingVariant
from ..kinematics.structure import with_known_structure
from .adjoint import DiscreteAdjoint, Integration, adjoint_solve
from .closing_conditions import ClosingConditions
from .events import mass_pivot, rank_condition, relative_pivot
from .inputs import (
    check_inputs,
    check_options,
    check_tolerances,
    initial_checks,
    matrix_checks,
    merge_params,
    raise_if_invalid,
)
from .partitioned import PARTITIONED, PartitionedCoordinates
from .solution import (
    RESULTS,
    Solution,
    explicit_tableau,
    raise_on_failure,
    rhs_evaluations,
)
from .stabilization import AbstractStabilization, get_stabilization
from .state_space import AbstractStateSpace, AllCoordinates
from .steppers import AbstractStepper, as_stepper
from .switching import Switching

if TYPE_CHECKING:
    from ..model import Mechanism

#: rtol and atol of the default step-size controller.
DEFAULT_TOLERANCE = 1e-8
#: The smallest step, relative to t1 − t0, before the solve stops as collapsed.
STEP_COLLAPSE = 1e-10
#: Relative pivot of C's independent rows (or of M's Cholesky factor) below which a collapsed
#: step size is taken as a singular configuration (a lock or toggle position) rather than a
#: failed step.
COLLAPSE_PIVOT = 1e-3


def state_space_of(
    method: str | AbstractFormulation | AbstractStateSpace, mechanism: Mechanism
) -> AbstractStateSpace:
    """The state space for `simulate(method=...)`: an `AbstractStateSpace` as it is;
    `"partitioned"` → `PartitionedCoordinates()` (coordinate partitioning that switches
    partitions along the motion); a formulation (name or instance, `"auto"` chosen for the
    mechanism's structure; `"partitioning"` is the fixed partition, as everywhere) →
    `AllCoordinates(formulation)`."""
    if isinstance(method, AbstractStateSpace):
        return method
    if method == PARTITIONED:
        return PartitionedCoordinates()
    return AllCoordinates(get_formulation(method, mechanism))


def simulate(
    mechanism: Mechanism,
    q0: ArrayLike,
    qd0: ArrayLike,
    t_span: tuple[ArrayLike, ArrayLike],
    *,
    method: str | AbstractFormulation | AbstractStateSpace = "auto",
    stabilization: str | AbstractStabilization = "projection",
    rtol: float | Array | None = None,
    atol: float | Array | None = None,
    saveat: ArrayLike | None = None,
    solver: diffrax.AbstractSolver | AbstractStepper | None = None,
    stepsize_controller: diffrax.AbstractStepSizeController | None = None,
    params: Params | None = None,
    dt0: float | Array | None = None,
    max_steps: int = 100_000,
    adjoint: diffrax.AbstractAdjoint | None = None,
    consistency_tol: float = 1e-6,
    rank_rtol: float | None = 1e-8,
    progress_meter: diffrax.AbstractProgressMeter | None = None,
    event: diffrax.Event | None = None,
    throw: bool = True,
) -> Solution:
    """Simulate a constrained mechanism from a consistent initial state.

    **Arguments:**

    - `mechanism`: a [`jaxmbs.Mechanism`][] (with a known structure: `reference_q`).
    - `q0`, `qd0`: consistent initial coordinates and velocities (see `jaxmbs.assemble`).
    - `t_span`: `(t0, t1)`, finite, t1 > t0.
    - `method`: `"auto"` (the default: the formulation chosen for the mechanism's structure,
      `jaxmbs.formulations.choose_formulation`; `Solution.method` names it), a formulation
      (name in `jaxmbs.METHODS` or instance) integrated in all coordinates;
      `"partitioned"`: coordinate partitioning with switching
      (`jaxmbs.PartitionedCoordinates`); or a state space instance
      (`jaxmbs.PartitionedCoordinates(...)`, `jaxmbs.ClosingConditions(...)`).
    - `stabilization`: `"none"`, `"baumgarte"`, `"projection"` or an instance
      (e.g. `jaxmbs.Baumgarte(alpha=5, beta=5)`).
    - `rtol`, `atol`: tolerances of the default step-size controller (default 1e-8 each;
      traced: other values reuse the compiled solve). With a `stepsize_controller` of your
      own, give them to it instead (passing both is an error).
    - `saveat`: output times (None: t1 only).
    - `solver`: a diffrax solver (default `diffrax.Tsit5()`). For a stiff mechanism (stiff
      springs, bushings, tyres) an implicit one, e.g. `diffrax.Kvaerno5()`; its default
      chord root finder is replaced by Newton's method with the exact Jacobian
      (`jaxmbs.integrate.solvers.exact_newton`); a root finder you pass is kept. Or a
      jaxmbs stepper (`jaxmbs.integrate.steppers.AbstractStepper`):
      `jaxmbs.GeneralizedAlpha(rho_inf=...)` integrates the index-3 equations, with a
      constant step (`stepsize_controller=diffrax.ConstantStepSize()`, `dt0`) or steps
      set by its local error estimate.
    - `stepsize_controller`: a diffrax step-size controller (default
      `diffrax.PIDController(rtol=rtol, atol=atol)`, with the step-size floor and error norm
      of the module notes).
    - `params`: parameters replacing the mechanism's (convenient for `jax.grad`); a partial
      mapping replaces only its keys.
    - `dt0`: initial step (None: chosen automatically); an array is traced, so that runs at
      several constant steps share one compiled program.
    - `max_steps`: step limit.
    - `adjoint`: how gradients are taken (default: reverse mode by the discrete adjoint over
      the forward run's accepted steps, `jaxmbs.DiscreteAdjoint()` — pass
      one to choose its segment length; diffrax's checkpointed adjoint with an `event` that
      has a root finder; and `diffrax.ForwardMode()` when `simulate` is differentiated by
      `jax.jvp`/`jax.jacfwd`); a diffrax adjoint given is used as is.
    - `consistency_tol`: the largest |Φ(q0)| and |c(q0, q̇0)| accepted.
    - `rank_rtol`: the rank check: stop with `RESULTS.singular_configuration` where the
      rank of C changes, i.e. a relative pivot falls below `rank_rtol`, in (0, 1); `None`:
      no rank check.
    - `progress_meter`: e.g. `diffrax.TqdmProgressMeter()` for long runs.
    - `event`: a `diffrax.Event` whose condition functions take `(t, (q, q̇), params)`; the
      run stops at the first crossing (located by the event's root finder, if any) and
      `Solution.event` / `Solution.t_final` say which condition fired and when.
    - `throw`: raise on failure (default: `jaxmbs.SimulationError` naming the cause and its
      time; under `jit`, equinox's runtime error) instead of returning a result code; use
      `throw=False` in batches so one failed sample does not lose the others.

    **Returns:** a [`jaxmbs.Solution`][].
    """
    # Over 80 lines only by the docstring of its 21 public arguments: the body checks them,
    # resolves the options once and hands them to `_solve`.
    if stepsize_controller is not None and (rtol is not None or atol is not None):
        raise ValueError(
            "rtol and atol set the default step-size controller; with stepsize_controller="
            f"{type(stepsize_controller).__name__}(...) give the tolerances to it instead"
        )
    rtol = DEFAULT_TOLERANCE if rtol is None else rtol
    atol = DEFAULT_TOLERANCE if atol is None else atol
    check_options(
        t_span=t_span, saveat=saveat, rtol=rtol, atol=atol, dt0=dt0, max_steps=max_steps,
        rank_rtol=rank_rtol, consistency_tol=consistency_tol,
    )  # fmt: skip
    if event is not None and not isinstance(event, diffrax.Event):
        raise ValueError(f"event must be a diffrax.Event, got {event!r}")
    q0, qd0, t0, t1, saveat = check_inputs(mechanism, q0, qd0, t_span, saveat)
    if stepsize_controller is None:
        check_tolerances(rtol, atol, q0.dtype)
    params = merge_params(mechanism.params, params, q0.dtype)
    mechanism = with_known_structure(mechanism.replace_params(params), q0, t0)
    stepper = as_stepper(solver)
    space = stepper.state_space(state_space_of(method, mechanism).prepare(mechanism))
    options = _Options(
        stabilization=get_stabilization(stabilization),
        solver=stepper,
        controller=_controller(stepsize_controller, rtol, atol, t0, t1, space),
        adjoint=_adjoint(adjoint, event, (mechanism, q0, qd0, t0, t1, saveat)),
        progress_meter=diffrax.NoProgressMeter() if progress_meter is None else progress_meter,
        event=event,
        dt0=dt0,
        max_steps=max_steps,
        consistency_tol=consistency_tol,
        rank_rtol=rank_rtol,
    )
    if throw and is_concrete(q0, qd0, t0, params):
        check = _initial_checks(mechanism, q0, qd0, t0, params, consistency_tol)
        raise_if_invalid(check, consistency_tol)
    solution = _solve(mechanism, space, q0, qd0, t0, t1, saveat, options)
    return raise_on_failure(solution) if throw else solution


def simulate_partitioned(
    mechanism: Mechanism,
    q0: ArrayLike,
    qd0: ArrayLike,
    t_span: tuple[ArrayLike, ArrayLike],
    *,
    independent: Sequence[int | str] | None = None,
    switching: bool | Switching = True,
    **options,
) -> Solution:
    """Shorthand for `simulate(..., method=PartitionedCoordinates(independent, switching))`:
    coordinate partitioning in the compact form with switching (Blajer et al. 1994);
    `options` are `simulate`'s."""
    method = PartitionedCoordinates(independent, switching)
    return simulate(mechanism, q0, qd0, t_span, method=method, **options)


def simulate_closing(
    mechanism: Mechanism,
    variants: ClosingVariant | Sequence[ClosingVariant],
    q0: ArrayLike,
    qd0: ArrayLike,
    t_span: tuple[ArrayLike, ArrayLike],
    *,
    variant: int | None = None,
    switching: bool | Switching = True,
    **options,
) -> Solution:
    """Shorthand for `simulate(..., method=ClosingConditions(variants, variant, switching))`:
    the minimal equations of closing conditions with switching between variants (Blajer,
    Schiehlen, Schirm 1993); `options` are `simulate`'s."""
    method = ClosingConditions(variants, variant, switching)
    return simulate(mechanism, q0, qd0, t_span, method=method, **options)


class _Options(eqx.Module):
    """Everything `simulate` needs besides the data; static where it shapes the compile."""

    stabilization: AbstractStabilization
    solver: AbstractStepper
    controller: diffrax.AbstractStepSizeController
    adjoint: diffrax.AbstractAdjoint | DiscreteAdjoint
    progress_meter: diffrax.AbstractProgressMeter
    event: diffrax.Event | None
    dt0: float | Array | None
    max_steps: int = eqx.field(static=True)
    consistency_tol: float = eqx.field(static=True)
    rank_rtol: float | None = eqx.field(static=True)


def _adjoint(
    adjoint: diffrax.AbstractAdjoint | DiscreteAdjoint | None,
    event: diffrax.Event | None,
    inputs: PyTree,
) -> diffrax.AbstractAdjoint | DiscreteAdjoint:
    """How the solve is differentiated: the given `adjoint`, or by what the caller does.

    - Forward mode (`jax.jvp`, `jax.jacfwd`: the `inputs` carry tangents,
      `_forward_tangents`) → `diffrax.ForwardMode()`, which integrates the tangents with
      the solve; a given adjoint that cannot (a reverse-mode rule) is refused with a hint.
    - Otherwise the discrete adjoint (`jaxmbs.integrate.adjoint`), except for an event
      located by a root finder: its time depends on the parameters through the root, which
      diffrax differentiates in its own adjoint, while the discrete adjoint takes the
      recorded steps' times as given.
    """
    if not _forward_tangents(inputs):
        if adjoint is not None:
            return adjoint
        return diffrax.RecursiveCheckpointAdjoint() if _root_located(event) else DiscreteAdjoint()
    if adjoint is None:
        return diffrax.ForwardMode()
    if isinstance(adjoint, _FORWARD_CAPABLE):
        return adjoint
    raise TypeError(
        f"forward-mode differentiation (jax.jvp, jax.jacfwd) cannot pass through "
        f"adjoint={type(adjoint).__name__}(), a reverse-mode rule; pass "
        f"adjoint=diffrax.ForwardMode(), or leave adjoint unset and simulate chooses it"
    )


def _root_located(event: diffrax.Event | None) -> bool:
    """Whether the run's end may be an event's time located by a root finder, inside a
    step (else the run ends at a step's end)."""
    return event is not None and event.root_finder is not None


#: The diffrax adjoints that forward-mode differentiation passes through.
_FORWARD_CAPABLE = (diffrax.ForwardMode, diffrax.DirectAdjoint)


@jax.custom_vjp
def _reverse_rule(leaves: list[Array]) -> list[Array]:
    """The identity with a reverse-mode rule: JAX refuses to push forward-mode tangents
    through it (a `TypeError` at trace time), which is how `_forward_tangents` sees them.
    Its result is unused: the compiled program holds nothing of it."""
    return leaves


_reverse_rule.defvjp(lambda leaves: (leaves, None), lambda _, cotangents: (cotangents,))


def _forward_tangents(inputs: PyTree) -> bool:
    """Whether the inexact arrays of `inputs` (the mechanism with its parameters, the
    initial state, the times) carry forward-mode tangents: the caller differentiates
    `simulate` by `jax.jvp`/`jax.jacfwd`. Decided once, before the solve is traced. (Under
    `jax.grad`, `vmap` and `jit` the rule passes; forward over reverse, as in
    `jax.hessian`, too: there the outer tangents go through the discrete adjoint's rules.)"""
    leaves = [x for x in jax.tree_util.tree_leaves(inputs) if eqx.is_inexact_array(x)]
    try:
        _reverse_rule(leaves)
    except TypeError:
        return True
    return False


def _controller(controller, rtol, atol, t0, t1, space: AbstractStateSpace):
    """The step-size controller: the default PID controller (tolerances as arrays, so that a
    study over tolerances reuses one compilation) or the given one, with the state space's
    error norm and the step-size floor of the module notes where it is a `PIDController`
    without one of its own."""
    dtype = t0.dtype
    floor = jnp.maximum(
        STEP_COLLAPSE * (t1 - t0),
        100 * jnp.finfo(dtype).eps * jnp.maximum(jnp.abs(t0), jnp.abs(t1)),
    )
    if controller is None:
        return diffrax.PIDController(
            rtol=jnp.asarray(rtol, dtype), atol=jnp.asarray(atol, dtype), norm=space.error_norm,
            dtmin=floor, force_dtmin=False,
        )  # fmt: skip
    if isinstance(controller, diffrax.PIDController) and controller.dtmin is None:
        return eqx.tree_at(
            lambda c: (c.dtmin, c.force_dtmin, c.norm),
            controller,
            (floor, False, space.error_norm),
            is_leaf=lambda x: x is None,
        )
    return controller


#: The checks of a concrete initial state, run once before the solve to name what is wrong
#: (a program run once: `quick_jit`).
_initial_checks = quick_jit(initial_checks)


def _map_saved(fn, *xs):
    """fn over the saved states, one after the other (`lax.map`, not `vmap`).

    A vmap would batch the LAPACK calls (QR, Cholesky) of the outputs and of the projection;
    jaxlib 0.10's CPU LAPACK kernels split such batches over XLA's intra-op thread pool and
    block waiting for them, which deadlocks when two batched calls run concurrently on a
    2-thread pool (seen with the 30-coordinate McPherson struts, projection + saveat).
    """
    return jax.lax.map(lambda args: fn(*args), xs)


def _along_first_axis(mask: Array, x: Array) -> Array:
    """`mask` over x's first axis, broadcast over the rest."""
    return mask.reshape(mask.shape + (1,) * (x.ndim - 1))


def _held_past(past: Array, saved: PyTree, final: PyTree) -> PyTree:
    """The saved times and states with those past the run's end replaced by the final ones:
    the outputs there are NaN anyway (`_nan_past`), and evaluated at the solver's fill
    values (inf) their derivatives would be NaN, which a zero cotangent does not cancel."""
    return jax.tree_util.tree_map(
        lambda x, x_end: jnp.where(_along_first_axis(past, x), x_end, x), saved, final
    )


def _nan_past(past: Array, x: Array) -> Array:
    """x with its outputs past the run's end NaN: multiplied by NaN or 1, so that a tangent
    through a NaN output is NaN, never a finite number of a truncated trajectory."""
    return x * jnp.where(_along_first_axis(past, x), jnp.nan, 1.0).astype(x.dtype)


@jax.custom_jvp
def _frozen(ok: Array, x: Array) -> Array:
    """x where the initial state is valid (`ok`), else zeros (a frozen sample that costs a
    batch nothing); its derivative is NaN where it is not valid: the outputs are NaN there,
    and a gradient with respect to the initial state must be NaN too, not zero."""
    return jnp.where(ok, x, 0.0)


@_frozen.defjvp
def _frozen_jvp(primals, tangents):
    ok, x = primals
    _, dx = tangents
    return _frozen(ok, x), dx * jnp.where(ok, 1.0, jnp.nan).astype(dx.dtype)


@jax.custom_vjp
def _nan_past_read(past: Array, x: Array) -> Array:
    """`_nan_past` for reverse mode: there the cotangent of a NaN output the loss does not
    read is zero, and multiplied by NaN it would make every gradient NaN. The cotangent
    passed back is NaN where the loss reads a NaN output (a nonzero cotangent), zero where
    it does not."""
    return _nan_past(past, x)


def _nan_past_read_fwd(past: Array, x: Array):
    return _nan_past(past, x), past


def _nan_past_read_bwd(past: Array, cotangent: Array):
    read = jnp.where(cotangent != 0, jnp.nan, 0.0).astype(cotangent.dtype)
    return None, jnp.where(_along_first_axis(past, cotangent), read, cotangent)


_nan_past_read.defvjp(_nan_past_read_fwd, _nan_past_read_bwd)


@jax.custom_jvp
def _detected(failed: Array, t: Array, inputs: PyTree) -> Array:
    """t, with a NaN derivative with respect to the run's `inputs` where `failed` (forward
    mode): the time of a failure is the end of the step at which a condition was found to
    hold, a decision, not a root located in t. The primal computes nothing (the program of
    a run that is not differentiated is unchanged)."""
    return t


@_detected.defjvp
def _detected_jvp(primals, tangents):
    failed, t, _ = primals
    return t, jnp.where(failed, jnp.nan, tangents[1]).astype(t.dtype)


@jax.custom_vjp
def _detected_read(failed: Array, t: Array, inputs: PyTree) -> Array:
    """`_detected` for reverse mode: NaN passed back to the inputs where `failed` and the
    loss reads t (a nonzero cotangent), as `_nan_past_read` does."""
    return t


def _detected_read_fwd(failed: Array, t: Array, inputs: PyTree):
    return t, (failed, inputs)


def _detected_read_bwd(residuals, cotangent: Array):
    failed, inputs = residuals
    poisoned = failed & (cotangent != 0)
    return (
        None,
        cotangent,
        jax.tree_util.tree_map(
            lambda x: (
                jnp.where(poisoned, jnp.nan, jnp.zeros_like(x)) if eqx.is_inexact_array(x) else None
            ),
            inputs,
        ),
    )


_detected_read.defvjp(_detected_read_fwd, _detected_read_bwd)


def _wrapped_solver(mechanism, space: AbstractStateSpace, options):
    """The stepper's diffrax solver with the state space's wrapper (projection, switching)."""
    solver = options.solver.diffrax_solver(mechanism, options.controller, options.adjoint)
    return space.wrap_solver(solver, mechanism, options.stabilization)


def _internal_conditions(mechanism, space: AbstractStateSpace, options):
    """The terminating conditions of a singular configuration: the rank of C (with the rank
    check on) and the state space's own."""
    internal = list(space.singular_conditions(mechanism))
    if options.rank_rtol is not None and mechanism.structure.rank > 0:

        def positions(y, t, params):
            return space.physical_state(mechanism, y, t, params)[0]

        internal.insert(0, rank_condition(mechanism, options.rank_rtol, positions))
    return internal


def _prepare(problem: tuple) -> Integration:
    """The solve's pieces, built once from `problem` = (mechanism, space, y0, args, t0, t1,
    saveat, options) alone: the diffrax terms, the wrapped solver (projection, switching),
    and the data (`adjoint_solve` differentiates a step as a function of the problem)."""
    mechanism, space, y0, args, t0, t1, saveat, options = problem
    return Integration(
        terms=diffrax.ODETerm(space.vector_field(mechanism, options.stabilization)),
        solver=_wrapped_solver(mechanism, space, options),
        y0=y0,
        args=args,
        t0=t0,
        t1=t1,
        saveat=saveat,
    )


def _conditions(mechanism, space: AbstractStateSpace, options) -> tuple[diffrax.Event | None, int]:
    """The solve's terminating event — the internal conditions of a singular configuration
    first, then the user's — and the number of internal ones."""
    internal = _internal_conditions(mechanism, space, options)
    user, user_directions = _user_conditions(space, mechanism, options.event)
    conditions = internal + user
    if not conditions:
        return None, len(internal)
    event = diffrax.Event(
        tuple(conditions),
        root_finder=None if options.event is None else options.event.root_finder,
        direction=tuple([None] * len(internal) + list(user_directions)),
    )
    return event, len(internal)


def _integrate(problem: tuple, record_steps: bool = False) -> diffrax.Solution:
    """The diffrax solve of `problem` (`_prepare`), built from it alone. Saved: the final
    state, the output times, and with `record_steps` the accepted steps' end times."""
    mechanism, space, y0, args, t0, t1, saveat, options = problem
    it = _prepare(problem)
    # The final state (where the run stopped) is saved apart from the output times.
    subs = [diffrax.SubSaveAt(t1=True)]
    if saveat is not None:
        subs.append(diffrax.SubSaveAt(ts=saveat))
    if record_steps:
        subs.append(diffrax.SubSaveAt(steps=True, fn=_no_state))
    # Under `adjoint_solve` the solve itself is not differentiated: any adjoint does.
    adjoint = options.adjoint
    if isinstance(adjoint, DiscreteAdjoint):
        adjoint = diffrax.RecursiveCheckpointAdjoint()
    return diffrax.diffeqsolve(
        it.terms,
        it.solver,
        t0,
        t1,
        options.dt0,
        y0,
        args=args,
        saveat=diffrax.SaveAt(subs=subs, solver_state=True),
        stepsize_controller=options.controller,
        max_steps=options.max_steps,
        adjoint=adjoint,
        event=_conditions(mechanism, space, options)[0],
        progress_meter=options.progress_meter,
        throw=False,
    )


def _no_state(t, y, args) -> None:
    """Saves nothing but the time (the recorded steps of `adjoint_solve`)."""
    return None


def _user_conditions(space, mechanism, event: diffrax.Event | None):
    """The user's event conditions on (t, (q, q̇), params), as conditions on the state y."""
    if event is None:
        return [], []

    def on_state(fn):
        def condition(t, y, args, **kwargs):
            params, _ = args
            return fn(t, space.physical_state(mechanism, y, t, params), params, **kwargs)

        return condition

    leaves, treedef = jax.tree_util.tree_flatten(event.cond_fn, is_leaf=callable)
    directions = treedef.flatten_up_to(event.direction)
    return [on_state(fn) for fn in leaves], directions


def _classify(out: diffrax.Solution, problem: tuple, ok: Array, n_internal: int):
    """What ended the run (module notes, "How a failure is named"): its `RESULTS` code,
    time, final state and the user's event that fired (−1 for none). A decision, not
    differentiated."""
    mechanism, space, _, args, t0, _, _, options = problem
    params = args[0]
    t_final, final = out.ts[0][0], jax.tree_util.tree_map(lambda x: x[0], out.ys[0])
    fired = jax.tree_util.tree_leaves(out.event_mask)  # [] without an event
    singular_event = jnp.any(jnp.asarray(fired[:n_internal] + [False]))
    user_fired = jnp.asarray(fired[n_internal:] + [False])
    event_index = jnp.where(jnp.any(user_fired), jnp.argmax(user_fired), -1)

    near_singular = jnp.zeros((), bool)
    if options.rank_rtol is not None:  # part of the rank check
        t_f, final_, params_ = jax.lax.stop_gradient((t_final, final, params))
        q_final = space.physical_state(mechanism, final_, t_f, params_)[0]
        near_singular = mass_pivot(mechanism, q_final, params_) < COLLAPSE_PIVOT
        if mechanism.structure.rank > 0:
            pivot = relative_pivot(mechanism, q_final, t_f, params_)
            near_singular = near_singular | (pivot < COLLAPSE_PIVOT)
    result = RESULTS.where(
        out.result == diffrax.RESULTS.max_steps_reached,
        RESULTS.max_steps_reached,
        RESULTS.step_failed,
    )
    result = RESULTS.where(
        (out.result == diffrax.RESULTS.dt_min_reached) & near_singular,
        RESULTS.singular_configuration,
        result,
    )
    result = RESULTS.where(
        out.result == diffrax.RESULTS.event_occurred,
        RESULTS.where(singular_event, RESULTS.singular_configuration, RESULTS.successful),
        result,
    )
    result = RESULTS.where(out.result == diffrax.RESULTS.successful, RESULTS.successful, result)
    if options.event is not None:  # a condition that turned NaN "fired" by its sign change
        user = _user_conditions(space, mechanism, options.event)[0]
        stopped = jax.lax.stop_gradient((t_final, final, args))
        values = jnp.stack([jnp.asarray(fn(*stopped), float) for fn in user])
        result = RESULTS.where(
            jnp.any(user_fired) & ~jnp.all(jnp.isfinite(values)), RESULTS.event_not_finite, result
        )
    result = RESULTS.where(ok, result, RESULTS.inconsistent_initial_conditions)
    return result, jnp.where(ok, t_final, t0), final, event_index


def _outputs(
    mechanism, space: AbstractStateSpace, stabilization, params, ts, ys, interpolated: bool
) -> tuple:
    """At the saved (t, y): q, q̇, q̈, λ, max |Φ|, max |c|, the energy (None without a
    potential energy) and whether M(q) is symmetric positive definite (`matrix_checks`; a
    decision, not differentiated), all from one evaluation of the state space's `Outputs`.
    `interpolated`: whether the states are the solver's dense output between steps
    (projected again by the stabilisation) or steps' end states."""

    def outputs(t, y):
        out = space.outputs(mechanism, stabilization, y, t, params, interpolated=interpolated)
        energy = (
            mechanism.energy(out.q, out.qd, params, out.mass_matrix)
            if mechanism.potential_energy is not None
            else None
        )
        screen = matrix_checks(mechanism, jax.lax.stop_gradient(out.mass_matrix))
        return (
            out.q,
            out.qd,
            out.qdd,
            out.multipliers,
            jnp.max(jnp.abs(out.phi), initial=0.0),
            jnp.max(jnp.abs(out.c), initial=0.0),
            energy,
            jnp.all(jnp.stack(screen)),
        )

    return _map_saved(outputs, ts, ys)


def _statistics(out: diffrax.Solution, problem: tuple) -> dict[str, Array]:
    """Steps taken, accepted and rejected, right-hand-side evaluations, and the state
    space's own counts (switches)."""
    space, options = problem[1], problem[-1]
    solver = _prepare(problem).solver
    num_steps = out.stats["num_steps"]
    rhs = rhs_evaluations(solver, num_steps, options.dt0 is None)
    tableau = explicit_tableau(solver)
    if tableau is not None and tableau.fsal:
        rhs = rhs + space.restarted_stages(out.solver_state)
    return {
        "num_steps": num_steps,
        "num_accepted_steps": out.stats["num_accepted_steps"],
        "num_rejected_steps": out.stats["num_rejected_steps"],
        "rhs_evaluations": rhs,
        **space.statistics(out.ys[-1], out.solver_state),
    }


@eqx.filter_jit
def _solve(
    mechanism, space: AbstractStateSpace, q0, qd0, t0, t1, saveat,
    options: _Options,
) -> Solution:  # fmt: skip
    params = mechanism.params
    ok = initial_checks(mechanism, q0, qd0, t0, params, options.consistency_tol)["ok"]
    # An invalid initial state (NaN, inconsistent) is replaced by zeros and frozen, so that
    # it costs a batch nothing; its outputs are NaN and its result code says why.
    y0, representable = space.initial_state(
        mechanism, _frozen(ok, q0), _frozen(ok, qd0), t0, params,
        options.consistency_tol,)  # fmt: skip
    ok = ok & representable
    problem = (mechanism, space, y0, (params, ok), t0, t1, saveat, options)
    if isinstance(options.adjoint, DiscreteAdjoint):
        segment = options.adjoint.segment_for(options.max_steps)
        out = adjoint_solve(problem, _integrate, _prepare, segment)
    else:
        out = _integrate(problem)
    n_internal = _conditions(mechanism, space, options)[1]
    result, t_final, final, event_index = _classify(out, problem, ok, n_internal)
    ts, ys = out.ts[-1], out.ys[-1]
    failed = result != RESULTS.successful
    past = ~ok | ~(ts <= t_final) | (failed if saveat is None else jnp.zeros((), bool))
    held = _held_past(past, (ts, ys), (t_final, final))
    # Without output times the one output is where the run ended: a step's end (already
    # projected), unless an event's root finder located the end inside a step.
    interpolated = saveat is not None or _root_located(options.event)
    q, qd, qdd, lam, res_phi, res_c, energy, mass_ok = _outputs(
        mechanism, space, options.stabilization, params, *held, interpolated
    )
    # M(q) screened at the outputs (and where the run ended): the first invalid one ends the
    # run there, named.
    invalid = ~mass_ok & ~past
    mass_failed = jnp.any(invalid)
    t_invalid = ts[jnp.argmax(invalid)]
    result = RESULTS.where(mass_failed, RESULTS.mass_matrix_invalid, result)
    t_final = jnp.where(mass_failed, t_invalid, t_final)
    past = past | (mass_failed & (ts >= t_invalid))
    forward_mode = isinstance(options.adjoint, diffrax.ForwardMode)

    def nan_past(x):
        return _nan_past(past, x) if forward_mode else _nan_past_read(past, x)

    # A failure's time is the end of the step at which it was detected, not a located
    # root: its derivative is NaN by rule, never the 0 of a fixed step time.
    stopped = (result != RESULTS.successful) & ok
    detected = _detected if forward_mode else _detected_read
    return Solution(
        ts=ts if saveat is None else saveat,  # the requested times, also past a failure
        q=nan_past(q),
        qd=nan_past(qd),
        qdd=nan_past(qdd),
        multipliers=nan_past(lam),
        position_residual=nan_past(res_phi),
        velocity_residual=nan_past(res_c),
        energy=None if energy is None else nan_past(energy),
        stats=_statistics(out, problem),
        result=result,
        t_final=detected(stopped, t_final, (y0, params)),
        event=event_index,
        method=space.name,
    )
