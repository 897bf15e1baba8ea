"""diffrax solver wrappers: hand everything to the wrapped solver, change what a step returns.

`ProjectedSolver` projects each step's end state onto the constraint manifolds (the
`jaxmbs.Projection` stabilisation); `jaxmbs.integrate.switching.SwitchingSolver` re-expresses
it in other independent coordinates. Both are `DelegatingSolver`s: every other property
(term structure, order, interpolation, root finder of an implicit solver…) is the wrapped
solver's, read through diffrax's public API.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax


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
    the drift component normal to the manifold.
    """

    project: Callable  # (t, y, args) -> y; a Module holding the mechanism

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, dense_info, solver_state, result = self.solver.step(
            terms, t0, t1, y0, args, solver_state, made_jump
        )
        return self.project(t1, y1, args), y_error, dense_info, solver_state, result
