"""`simulate`: integrate a mechanism with diffrax and return a `Solution`.

The state is (q, q̇); the vector field is (q̇, q̈(t, q, q̇)) with q̈ from a formulation
(`jaxmbs.formulations`), so the index-1 DAE of Pękal–Frączek 2016 (eq 2.5) is integrated as
an ODE. Everything is pure JAX: `simulate` can be jit-ed, vmapped over q0, q̇0 and the
parameters, and differentiated (diffrax's checkpointed adjoint by default).

Failures never return silent garbage: a result code per trajectory (`RESULTS`), raised as an
error when `throw=True` (the default, like diffrax) or returned for the caller to inspect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.checks import is_concrete
from .._internal.types import Array, ArrayLike, Params
from ..formulations import AbstractFormulation, get_formulation
from ..kinematics.constraints import position_residual, velocity_residual
from ..kinematics.structure import Structure, resolve_structure
from .dynamics import accelerations_and_multipliers, equation_terms
from .events import singularity_event
from .inputs import check_inputs, initial_checks, raise_if_invalid
from .solution import RESULTS, Solution, result_code, rhs_evaluations
from .stabilization import AbstractStabilization, get_stabilization

if TYPE_CHECKING:
    from ..model import Mechanism


def simulate(
    mechanism: Mechanism,
    q0: ArrayLike,
    qd0: ArrayLike,
    t_span: tuple[ArrayLike, ArrayLike],
    *,
    method: str | AbstractFormulation = "qr",
    stabilization: str | AbstractStabilization = "projection",
    rtol: float | Array = 1e-8,
    atol: float | Array = 1e-8,
    saveat: ArrayLike | None = None,
    solver: diffrax.AbstractSolver | None = None,
    stepsize_controller: diffrax.AbstractStepSizeController | None = None,
    params: Params | None = None,
    dt0: float | None = None,
    max_steps: int = 100_000,
    adjoint: diffrax.AbstractAdjoint | None = None,
    consistency_tol: float = 1e-6,
    check_rank: bool = True,
    rank_rtol: float = 1e-8,
    progress_meter: diffrax.AbstractProgressMeter | None = None,
    throw: bool = True,
) -> Solution:
    """Simulate a constrained mechanism from a consistent initial state.

    **Arguments:**

    - `mechanism`: a [`jaxmbs.Mechanism`][] (with a known structure: `reference_q`).
    - `q0`, `qd0`: consistent initial coordinates and velocities (see `jaxmbs.assemble`).
    - `t_span`: `(t0, t1)`.
    - `method`: formulation name (`jaxmbs.METHODS`) or instance.
    - `stabilization`: `"none"`, `"baumgarte"`, `"projection"` or an instance
      (e.g. `jaxmbs.Baumgarte(alpha=5, beta=5)`).
    - `rtol`, `atol`: tolerances of the PID step-size controller (traced: other values
      reuse the compiled solve).
    - `saveat`: output times (None: t1 only).
    - `solver`: a diffrax solver (default `diffrax.Tsit5()`).
    - `stepsize_controller`: a diffrax step-size controller (default
      `diffrax.PIDController(rtol=rtol, atol=atol)`; when given, `rtol` and `atol` are unused).
    - `params`: parameters replacing `mechanism.params` (convenient for `jax.grad`).
    - `dt0`: initial step (None: chosen automatically).
    - `max_steps`: step limit.
    - `adjoint`: diffrax adjoint for reverse-mode gradients (default checkpointed).
    - `consistency_tol`: the largest |Φ(q0)| and |c(q0, q̇0)| accepted.
    - `check_rank`: stop with `RESULTS.singular_configuration` if the rank of C changes, or
      if the formulation's fixed pivot block (coordinate partitioning: Φ_u) degenerates.
    - `rank_rtol`: relative pivot size below which the rank is taken to change.
    - `progress_meter`: e.g. `diffrax.TqdmProgressMeter()` for long runs.
    - `throw`: raise on failure (default) instead of returning a result code; use
      `throw=False` in batches so one failed sample does not lose the others.

    **Returns:** a [`jaxmbs.Solution`][].
    """
    q0, qd0, t0, t1, saveat = check_inputs(mechanism, q0, qd0, t_span, saveat)
    params = mechanism.params if params is None else params
    # Parameters become arrays of the state's dtype: traced, never baked into the compile.
    params = jax.tree_util.tree_map(
        lambda x: x if isinstance(x, jax.Array) else jnp.asarray(x, q0.dtype), params
    )
    mechanism = mechanism.replace_params(params)
    structure = resolve_structure(mechanism, q0, t0)
    options = _Options(
        formulation=get_formulation(method),
        stabilization=get_stabilization(stabilization),
        solver=diffrax.Tsit5() if solver is None else solver,
        controller=(
            # Arrays, not Python floats: a study over tolerances reuses one compilation.
            diffrax.PIDController(
                rtol=jnp.asarray(rtol, q0.dtype), atol=jnp.asarray(atol, q0.dtype)
            )
            if stepsize_controller is None
            else stepsize_controller
        ),
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
        progress_meter=diffrax.NoProgressMeter() if progress_meter is None else progress_meter,
        dt0=dt0,
        max_steps=max_steps,
        consistency_tol=consistency_tol,
        rank_rtol=rank_rtol if check_rank else None,
        throw=throw,
    )
    if throw and is_concrete(q0, qd0, t0, params):
        check = eqx.filter_jit(initial_checks)(mechanism, t0, q0, qd0, params, consistency_tol)
        raise_if_invalid(check, consistency_tol)
    return _solve(mechanism, structure, q0, qd0, t0, t1, saveat, options)


class _Options(eqx.Module):
    """Everything `simulate` needs besides the data; static for the compiled solve."""

    formulation: AbstractFormulation
    stabilization: AbstractStabilization
    solver: diffrax.AbstractSolver
    controller: diffrax.AbstractStepSizeController
    adjoint: diffrax.AbstractAdjoint
    progress_meter: diffrax.AbstractProgressMeter
    dt0: float | None = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    consistency_tol: float = eqx.field(static=True)
    rank_rtol: float | None = eqx.field(static=True)
    throw: bool = eqx.field(static=True)


def _split(y: Array, n: int) -> tuple[Array, Array]:
    """(q, q̇) from the flat state y = [q; q̇] (also along a leading time axis)."""
    return y[..., :n], y[..., n:]


class _VectorField(eqx.Module):
    """y = [q; q̇] ↦ [q̇; q̈] for diffrax; a Module so that equal mechanisms reuse compilations.

    The state is one flat array rather than the pytree (q, q̇): diffrax then runs each
    Runge–Kutta stage, error norm and step update as single fused operations instead of one
    per leaf, which halves the per-step overhead of a small mechanism.

    The call is jitted (as are the projector's and the other integrators' fields): diffrax
    traces a step several times, and a jitted function is traced once per input types.
    """

    mechanism: Mechanism
    structure: Structure = eqx.field(static=True)
    formulation: AbstractFormulation
    stabilization: AbstractStabilization

    @eqx.filter_jit
    def __call__(self, t, y, args):
        params, valid = args
        q, qd = _split(y, self.structure.n)
        M, Q, C, gamma = equation_terms(
            self.mechanism, self.formulation, self.stabilization, t, q, qd, params
        )
        qdd = self.formulation.accelerations(M, Q, C, gamma, self.structure)
        # An invalid sample is frozen (zero field), so it finishes at once inside a batch.
        return jnp.where(valid, jnp.concatenate([qd, qdd]), 0.0)


class _Projector(eqx.Module):
    """y = [q; q̇] ↦ the stabilisation's projection of (q, q̇) (`AbstractStabilization.project`)."""

    mechanism: Mechanism
    structure: Structure = eqx.field(static=True)
    stabilization: AbstractStabilization

    @eqx.filter_jit
    def __call__(self, t, y, args):
        params, valid = args
        q, qd = _split(y, self.structure.n)
        q, qd = self.stabilization.project(self.mechanism, self.structure, t, q, qd, params)
        return jnp.where(valid, jnp.concatenate([q, qd]), y)


def _map_saved(fn, ts, q, qd):
    """fn over the saved states, one after the other (`lax.map`, not `vmap`).

    A vmap would batch the LAPACK calls (QR, Cholesky) of the outputs and of the projection;
    jaxlib 0.10's CPU LAPACK kernels split such batches over XLA's intra-op thread pool and
    block waiting for them, which deadlocks when two batched calls run concurrently on a
    2-thread pool (seen with the 30-coordinate McPherson struts, projection + saveat).
    """
    return jax.lax.map(lambda args: fn(*args), (ts, q, qd))


@eqx.filter_jit
def _solve(mechanism, structure, q0, qd0, t0, t1, saveat, options: _Options) -> Solution:
    params = mechanism.params
    stabilization = options.stabilization
    ok = initial_checks(mechanism, t0, q0, qd0, params, options.consistency_tol)["ok"]
    # An invalid initial state (NaN, inconsistent) is replaced by zeros and frozen, so that
    # it costs a batch nothing; its outputs are NaN and its result code says why.
    y0 = jnp.where(ok, jnp.concatenate([q0, qd0]), 0.0)
    vector_field = _VectorField(mechanism, structure, options.formulation, stabilization)
    project = _Projector(mechanism, structure, stabilization)
    solver = options.solver
    if (
        isinstance(options.adjoint, diffrax.ForwardMode)
        and isinstance(solver, diffrax.AbstractRungeKutta)
        and solver.scan_kind is None
    ):
        # diffrax makes the stage loop forward-differentiable ("lax") itself, but only for a
        # bare Runge–Kutta solver, not inside the projection wrapper: do it before wrapping.
        solver = eqx.tree_at(lambda s: s.scan_kind, solver, "lax", is_leaf=lambda x: x is None)
    solver = stabilization.wrap_solver(solver, project)
    # An unconstrained mechanism (e.g. an open chain in joint coordinates) has no rank to lose.
    check_rank = options.rank_rtol is not None and structure.rank > 0
    out = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field),
        solver,
        t0,
        t1,
        options.dt0,
        y0,
        args=(params, ok),
        saveat=diffrax.SaveAt(t1=True) if saveat is None else diffrax.SaveAt(ts=saveat),
        stepsize_controller=options.controller,
        max_steps=options.max_steps,
        adjoint=options.adjoint,
        event=(
            singularity_event(mechanism, structure, options.rank_rtol, options.formulation)
            if check_rank
            else None
        ),
        progress_meter=options.progress_meter,
        throw=False,
    )
    ts, (q, qd) = out.ts, _split(out.ys, structure.n)
    # Dense output between steps is interpolated: the stabilisation projects it too.
    q, qd = _map_saved(
        lambda t, q_, qd_: _split(project(t, jnp.concatenate([q_, qd_]), (params, ok)), q_.size),
        ts,
        q,
        qd,
    )
    q, qd = jnp.where(ok, q, jnp.nan), jnp.where(ok, qd, jnp.nan)

    def outputs(t, q_, qd_):
        qdd, lam = accelerations_and_multipliers(
            mechanism,
            t,
            q_,
            qd_,
            params,
            method=options.formulation,
            stabilization=stabilization,
            structure=structure,
        )
        phi = position_residual(mechanism, t, q_, params)
        c = velocity_residual(mechanism, t, q_, qd_, params)
        energy = (
            mechanism.energy(q_, qd_, params) if mechanism.potential_energy is not None else None
        )
        return (
            qdd,
            lam,
            jnp.max(jnp.abs(phi), initial=0.0),
            jnp.max(jnp.abs(c), initial=0.0),
            energy,
        )

    qdd, lam, res_phi, res_c, energy = _map_saved(outputs, ts, q, qd)
    code = result_code(out.result, ok)
    if options.throw:
        code = eqx.branched_error_if(code, code != RESULTS.successful, code, RESULTS.messages)
    num_steps = out.stats["num_steps"]
    stats = {
        "num_steps": num_steps,
        "num_accepted_steps": out.stats["num_accepted_steps"],
        "num_rejected_steps": out.stats["num_rejected_steps"],
        "rhs_evaluations": rhs_evaluations(solver, num_steps, options.dt0 is None),
    }
    return Solution(
        ts=ts,
        q=q,
        qd=qd,
        qdd=qdd,
        multipliers=lam,
        position_residual=res_phi,
        velocity_residual=res_c,
        energy=energy,
        stats=stats,
        result=code,
    )
