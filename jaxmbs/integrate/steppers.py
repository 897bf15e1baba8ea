"""How `simulate` steps in time: a diffrax solver on the state space's ODE, or a scheme of
its own on the mechanism's equations (`jaxmbs.GeneralizedAlpha`).

`simulate(solver=...)` takes either; `as_stepper` turns the argument into an
`AbstractStepper` once, at the boundary (as `get_stabilization` turns a name into a
stabilisation), and the core then calls the stepper's two methods — which state space it
integrates, and the diffrax solver that takes the steps — without asking which one it holds.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

import diffrax
import equinox as eqx

from .solvers import exact_newton, multiply_add_stages, with_controller_tolerances
from .state_space import AbstractStateSpace

if TYPE_CHECKING:
    from ..model import Mechanism


class AbstractStepper(eqx.Module):
    """A time-stepping scheme of `simulate`: the state space it integrates and the diffrax
    solver (`diffrax.AbstractSolver`) whose `step` is one of its steps."""

    @abc.abstractmethod
    def state_space(self, space: AbstractStateSpace) -> AbstractStateSpace:
        """The state space integrated, given the one `method=` chose (prepared)."""

    @abc.abstractmethod
    def diffrax_solver(
        self,
        mechanism: Mechanism,
        controller: diffrax.AbstractStepSizeController,
        adjoint: diffrax.AbstractAdjoint | eqx.Module,
    ) -> diffrax.AbstractSolver:
        """The diffrax solver of one step (before the state space's wrapper); raises
        `ValueError` for a controller or adjoint the scheme cannot run with."""


class DiffraxStepper(AbstractStepper):
    """A diffrax solver integrating the state space's ODE (`simulate`'s `solver=` given as a
    diffrax solver, default `diffrax.Tsit5()`).

    Its explicit Runge–Kutta stages become multiply-adds (`multiply_add_stages`), run as a
    `lax` loop under `diffrax.ForwardMode`; an implicit solver's default chord root finder
    becomes Newton's method with the exact Jacobian (`exact_newton`), its tolerances those of
    the controller (`with_controller_tolerances`).
    """

    solver: diffrax.AbstractSolver

    def state_space(self, space):
        return space

    def diffrax_solver(self, mechanism, controller, adjoint):
        solver = _forward_mode_stages(multiply_add_stages(self.solver), adjoint)
        return with_controller_tolerances(exact_newton(solver), controller)


def _forward_mode_stages(solver: diffrax.AbstractSolver, adjoint) -> diffrax.AbstractSolver:
    """diffrax makes the stage loop forward-differentiable ("lax") itself, but only for a
    bare Runge–Kutta solver, not inside a wrapper: do it before wrapping."""
    if (
        isinstance(adjoint, diffrax.ForwardMode)
        and isinstance(solver, diffrax.AbstractRungeKutta)
        and solver.scan_kind is None
    ):
        return eqx.tree_at(lambda s: s.scan_kind, solver, "lax", is_leaf=lambda x: x is None)
    return solver


def as_stepper(solver: diffrax.AbstractSolver | AbstractStepper | None) -> AbstractStepper:
    """`simulate`'s `solver=` as a stepper: a stepper as it is, a diffrax solver as
    `DiffraxStepper(solver)`, None as `DiffraxStepper(diffrax.Tsit5())`."""
    if isinstance(solver, AbstractStepper):
        return solver
    if solver is None:
        return DiffraxStepper(diffrax.Tsit5())
    if not isinstance(solver, diffrax.AbstractSolver):
        raise ValueError(
            f"solver must be a diffrax solver or a jaxmbs stepper (jaxmbs.GeneralizedAlpha), "
            f"got {solver!r}"
        )
    return DiffraxStepper(solver)
