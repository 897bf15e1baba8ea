"""diffrax solver wrappers: hand everything to the wrapped solver, change what a step returns.

`ProjectedSolver` projects each step's end state onto the constraint manifolds (the
`jaxmbs.Projection` stabilisation); `jaxmbs.integrate.switching.SwitchingSolver` re-expresses
it in other independent coordinates. Both are `DelegatingSolver`s: every other property
(term structure, order, interpolation, root finder of an implicit solver…) is the wrapped
solver's, read through diffrax's public API. A `DelegatingSolver` always wraps a diffrax
solver itself, never another wrapper: diffrax forwards its `isinstance` checks (is the
solver implicit? adaptive?) through one level of wrapping only, and an implicit solver seen
as explicit would keep its Newton tolerances unset.

Implicit solvers (`diffrax.Kvaerno5`, `ImplicitEuler`, …) run through the wrappers unchanged,
with one substitution (`exact_newton`): diffrax's default root finder, the chord iteration
`diffrax.VeryChord`, keeps the Jacobian of the step's first stage, and on a constrained stiff
mechanism it stalls — the stiff directions turn with the bodies within a step (a spring along
a swinging rod), the chord diverges, the step is rejected and shrunk: 15 000 steps of
`Kvaerno5` for the stiff spring pendulum's first second, more than `Tsit5`'s 13 161.
`optimistix.Newton` re-evaluates the Jacobian at every iteration and takes 187 (153
accepted). Either takes the exact Jacobian of the reduced ODE by forward-mode autodiff
(`lineax.JacobianLinearOperator`, one jvp per state component, then an LU factorisation).
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._internal.types import Array, PyTree


class DelegatingSolver(diffrax.AbstractWrappedSolver):
    """A diffrax solver wrapper that hands everything but `step` to the wrapped `solver`
    (the base of `ProjectedSolver` and `jaxmbs.integrate.switching.SwitchingSolver`)."""

    solver: diffrax.AbstractSolver

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    @property
    def scan_kind(self):
        """The wrapped solver's stage loop kind (diffrax's ForwardMode reads it)."""
        return getattr(self.solver, "scan_kind", "lax")

    @property
    def root_finder(self):
        """The wrapped implicit solver's root finder (diffrax sets its tolerances through
        this path; an explicit solver has none, and the attribute is absent)."""
        return self.solver.root_finder

    @property
    def root_find_max_steps(self) -> int:
        """The wrapped implicit solver's Newton iteration limit."""
        return self.solver.root_find_max_steps

    @property
    def tableau(self):
        """The wrapped Runge–Kutta method's Butcher tableau."""
        return self.solver.tableau

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


class ProjectedSolver(DelegatingSolver):
    """A diffrax solver whose accepted state is projected onto the constraint manifold.

    The wrapped solver's error estimate (of the unprojected step) is passed on unchanged, so
    adaptive step-size control behaves as without projection; the projection only removes
    the drift component normal to the manifold. Where the projection does not hold (its
    residual above its tolerance), the error estimate is infinite and the step rejected.
    """

    project: Callable  # (t, y, args) -> (y, holds); a Module holding the mechanism

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, dense_info, solver_state, result = self.solver.step(
            terms, t0, t1, y0, args, solver_state, made_jump
        )
        y1, holds = self.project(t1, y1, args)
        return y1, rejected_unless(holds, y_error), dense_info, solver_state, result


def rejected_unless(holds: Array, y_error: PyTree) -> PyTree:
    """The step's error estimate where `holds`, else infinite: the step-size controller
    rejects the step and shortens it."""
    return jax.tree_util.tree_map(lambda e: jnp.where(holds, e, jnp.inf), y_error)


def _stage_sum(coefficients: np.ndarray, ks: list) -> PyTree:
    """Σ_j a_j k_j over the stages `ks` (pytrees) as a chain of multiply-adds, the known zero
    coefficients skipped; None when every coefficient is zero."""
    terms = [(float(a), k) for a, k in zip(coefficients, ks, strict=False) if a != 0]
    if not terms:
        return None
    total = jax.tree_util.tree_map(lambda k: terms[0][0] * k, terms[0][1])
    for a, k in terms[1:]:
        total = jax.tree_util.tree_map(lambda s, k_, a=a: s + a * k_, total, k)
    return total


class MultiplyAddRungeKutta(diffrax.AbstractAdaptiveSolver):
    """An explicit Runge–Kutta method of diffrax (its tableau, orders and interpolation) whose
    stage combinations y₀ + Σ_j a_ij k_j, y₁ and the error estimate Σ_j (b_j − b̂_j) k_j are
    chains of multiply-adds over the stages, with the tableau's zeros skipped.

    diffrax forms these sums as tensor products of a tableau row with the stacked stages;
    XLA's CPU backend hands such a product to a library routine and, under `jax.vmap`,
    first transposes the whole stage buffer at every stage. For the state sizes of a
    mechanism, the call and the copy cost more than the arithmetic; multiply-adds fuse with
    their neighbours and read a batched buffer in place. The same method, steps and results
    up to round-off. The stages run in a `fori_loop` (the vector field compiled once per
    step), with each stage's row of the tableau read from a static array.
    """

    solver: diffrax.AbstractERK

    term_structure = diffrax.AbstractTerm

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def tableau(self) -> diffrax.ButcherTableau:
        """The wrapped method's Butcher tableau."""
        return self.solver.tableau

    def order(self, terms):
        return self.solver.order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def init(self, terms, t0, t1, y0, args):
        """The first stage's vector field f(t₀, y₀) for a first-same-as-last method."""
        return terms.vf(t0, y0, args) if self.solver.tableau.fsal else None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        tableau = self.solver.tableau
        control = terms.contr(t0, t1)
        dt = t1 - t0
        if not tableau.fsal:
            f0 = terms.vf(t0, y0, args)
        elif made_jump is False:  # static: no jump in the solve
            f0 = solver_state
        else:  # after a jump (a switch of coordinates) the stored stage is stale
            f0 = jax.lax.cond(made_jump, lambda: terms.vf(t0, y0, args), lambda: solver_state)
        n_stages = len(tableau.c) + 1
        a_matrix = np.zeros((n_stages, n_stages))
        for i, row in enumerate(tableau.a_lower):
            a_matrix[i + 1, : len(row)] = row
        c = np.concatenate([[0.0], tableau.c])
        dtype = jnp.result_type(t0, t1)
        k0 = terms.prod(f0, control)
        stages = jax.tree_util.tree_map(
            lambda k: jnp.zeros((n_stages, *k.shape), k.dtype).at[0].set(k), k0
        )

        def stage(i, carry):
            # A loop, not unrolled: the vector field is traced and compiled once per step.
            stages, _, _ = carry
            a = jnp.asarray(a_matrix, dtype)[i]
            y = jax.tree_util.tree_map(lambda y0_, ks: y0_ + _row_sum(a, ks, n_stages), y0, stages)
            f = terms.vf(t0 + jnp.asarray(c, dtype)[i] * dt, y, args)
            k = terms.prod(f, control)
            stages = jax.tree_util.tree_map(lambda ks, k_: ks.at[i].set(k_), stages, k)
            return stages, y, f

        stages, y_last, f_last = jax.lax.fori_loop(1, n_stages, stage, (stages, y0, f0))
        ks = [jax.tree_util.tree_map(lambda x, j=j: x[j], stages) for j in range(n_stages)]
        if tableau.ssal:
            y1 = y_last
        else:
            y1 = jax.tree_util.tree_map(jnp.add, y0, _stage_sum(tableau.b_sol, ks))
        y_error = _stage_sum(tableau.b_error, ks)
        if y_error is None:
            y_error = jax.tree_util.tree_map(jnp.zeros_like, y0)
        dense_info = dict(y0=y0, y1=y1, k=stages)
        new_state = f_last if tableau.fsal else None
        return y1, y_error, dense_info, new_state, diffrax.RESULTS.successful


def _row_sum(a: Array, ks: Array, n_stages: int) -> Array:
    """Σ_j a_j ks[j] for a traced tableau row `a`, as a chain of multiply-adds."""
    total = a[0] * ks[0]
    for j in range(1, n_stages):
        total = total + a[j] * ks[j]
    return total


def exact_newton(solver: diffrax.AbstractSolver) -> diffrax.AbstractSolver:
    """An implicit diffrax solver with diffrax's default chord root finder gets Newton's
    method with the exact autodiff Jacobian at every iteration (`optimistix.Newton`, its
    tolerances and norm taken from the step-size controller as diffrax's default's are);
    an explicit solver, or a root finder the user chose, is unchanged."""
    if not isinstance(solver, diffrax.AbstractImplicitSolver):
        return solver
    default = diffrax.with_stepsize_controller_tols(diffrax.VeryChord)()
    if not eqx.tree_equal(solver.root_finder, default):
        return solver
    newton = diffrax.with_stepsize_controller_tols(optx.Newton)()
    return eqx.tree_at(lambda s: s.root_finder, solver, newton)


def with_controller_tolerances(
    solver: diffrax.AbstractSolver, controller: diffrax.AbstractStepSizeController
) -> diffrax.AbstractSolver:
    """An implicit solver whose root finder takes its `rtol`, `atol`, `norm` from the
    step-size controller (diffrax's default) with those set from `controller` now, as
    `diffrax.diffeqsolve` sets them: a step taken outside the solve (the discrete adjoint,
    `jaxmbs.integrate.adjoint`) then solves its stages as the solve did."""
    if not isinstance(solver, diffrax.AbstractImplicitSolver) or not isinstance(
        controller, diffrax.AbstractAdaptiveStepSizeController
    ):
        return solver
    unset = diffrax.with_stepsize_controller_tols(optx.Newton)().rtol
    names = [a for a in ("rtol", "atol", "norm") if getattr(solver.root_finder, a) is unset]
    return eqx.tree_at(
        lambda s: tuple(getattr(s.root_finder, a) for a in names),
        solver,
        tuple(getattr(controller, a) for a in names),
    )


def multiply_add_stages(solver: diffrax.AbstractSolver) -> diffrax.AbstractSolver:
    """A diffrax explicit Runge–Kutta solver as `MultiplyAddRungeKutta`; others unchanged."""
    if isinstance(solver, diffrax.AbstractERK) and not solver.tableau.implicit:
        return MultiplyAddRungeKutta(solver)
    return solver
