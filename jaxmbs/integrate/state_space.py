"""How the motion becomes an ODE for diffrax: the state space strategies of `simulate`.

The equations of motion M q̈ + Cᵀλ = Q, C q̈ = Γ (Pękal–Frączek 2016, eq 2.5) are integrated
in one of three state spaces, each an `AbstractStateSpace`:

- `AllCoordinates(formulation)`: y = [q; q̇], q̈ from any formulation (`method="qr"`, …);
- `PartitionedCoordinates`: y = (q, v_I, partition), Blajer's compact partitioned equations
  with switching of the independent coordinates (`method="partitioned"`,
  `jaxmbs.integrate.partitioned`);
- `ClosingConditions`: y = (q_I, v_I, variant, branches), the minimal equations of explicit
  closing conditions with switching between variants (`jaxmbs.integrate.closing_conditions`).

The one integration core (`jaxmbs.simulate`) asks the state space for the initial state, the
vector field, the solver wrapper (projection, switching), the conditions under which its
coordinates are singular, and the physical state (q, q̇, q̈, λ) at the output times; it never
asks which state space it holds.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from .._internal.types import Array, Coordinates, Params, PyTree, Velocities
from ..formulations import AbstractFormulation, get_formulation
from ..kinematics import algebra
from ..kinematics.constraints import constraint_jacobian, constraint_residuals
from ..kinematics.structure import Structure
from .dynamics import equation_terms
from .solvers import ProjectedSolver
from .stabilization import AbstractStabilization

if TYPE_CHECKING:
    from ..model import Mechanism


class Outputs(NamedTuple):
    """What `jaxmbs.simulate` reports at one output time: q, q̇, q̈, the minimum-norm λ, and
    M(q), Φ(q, t), c(t, q, q̇) at that state (for the energy, the mass-matrix screen and the
    residuals), taken from the terms that gave q̈ where the state space has them."""

    q: Coordinates
    qd: Velocities
    qdd: Array
    multipliers: Array
    mass_matrix: Array
    phi: Array
    c: Array


def read_off(mechanism: Mechanism, q, qd, qdd, lam, t, params: Params) -> Outputs:
    """`Outputs` of a state whose q̈ and λ came without M, Φ and c: those evaluated."""
    return Outputs(
        q,
        qd,
        qdd,
        lam,
        algebra.mass_matrix(mechanism, q, params),
        *constraint_residuals(mechanism, q, qd, t, params),
    )


class AbstractStateSpace(eqx.Module):
    """A way of integrating the motion: the ODE state, its field and what happens between
    steps. Subclasses implement the abstract methods; the integration core calls them all."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The method's name (reported in `Solution.method`)."""

    def prepare(self, mechanism: Mechanism) -> AbstractStateSpace:
        """Checks against the mechanism, outside jit (raising `ValueError`), and the strategy
        with whatever it resolves statically (default: itself)."""
        return self

    @abc.abstractmethod
    def initial_state(
        self,
        mechanism: Mechanism,
        q0: Coordinates,
        qd0: Velocities,
        t0: Array,
        params: Params,
        consistency_tol: float,
    ) -> tuple[PyTree, Array]:
        """`(y0, representable)`: the ODE state for (q0, q̇0) and whether it represents them
        (to `consistency_tol`)."""

    @abc.abstractmethod
    def vector_field(
        self, mechanism: Mechanism, stabilization: AbstractStabilization
    ) -> Callable[[Array, PyTree, tuple], PyTree]:
        """`(t, y, (params, valid)) -> dy/dt`; zero where `valid` is False."""

    @abc.abstractmethod
    def wrap_solver(
        self,
        solver: diffrax.AbstractSolver,
        mechanism: Mechanism,
        stabilization: AbstractStabilization,
    ) -> diffrax.AbstractSolver:
        """The diffrax solver with what this state space does after each step (the
        stabilisation's projection, switching of coordinates)."""

    @abc.abstractmethod
    def physical_state(
        self, mechanism: Mechanism, y: PyTree, t: Array, params: Params
    ) -> tuple[Coordinates, Velocities]:
        """(q, q̇) represented by the state y."""

    @abc.abstractmethod
    def outputs(
        self,
        mechanism: Mechanism,
        stabilization: AbstractStabilization,
        y: PyTree,
        t: Array,
        params: Params,
        *,
        interpolated: bool = True,
    ) -> Outputs:
        """The physical state (q, q̇, q̈, λ) at an output time, with λ the minimum-norm
        multipliers of all rows, and what the Solution reads off it (`Outputs`). An
        `interpolated` state (dense output between steps) is projected by the
        stabilisation; a step's end state (`interpolated=False`) already is."""

    def singular_conditions(self, mechanism: Mechanism) -> tuple[Callable[..., Array], ...]:
        """Event conditions `(t, y, (params, valid), **kwargs)` under which the integrated
        coordinates are singular, besides the rank of C (default: none)."""
        return ()

    def error_norm(self, y: PyTree) -> Array:
        """The norm of a step's error estimate for step-size control (default: RMS over y)."""
        return optx.rms_norm(y)

    def statistics(self, ys: PyTree, solver_state: PyTree) -> dict[str, Array]:
        """Statistics of the run besides the step counts, from the states at the output
        times and the final solver state (default: none)."""
        return {}

    def restarted_stages(self, solver_state: PyTree) -> Array:
        """How many first-same-as-last stages were evaluated again (after a switch of
        coordinates: the stored stage belongs to the old ones); default none."""
        return jnp.zeros((), jnp.int32)


class AbstractStateFunction(eqx.Module):
    """A function `(t, y, (params, valid))` of the integrated state that holds the mechanism
    (and so its static structure): vector fields, projections, switches. A Module, so that
    equal mechanisms reuse compilations; jitted, because diffrax traces a step several times
    and a jitted function is traced once per input types. Subclasses implement `evaluate`."""

    mechanism: Mechanism

    @property
    def structure(self) -> Structure:
        """The mechanism's static structure."""
        return self.mechanism.structure

    @eqx.filter_jit
    def __call__(self, t, y, args):
        params, valid = args
        return self.evaluate(y, t, params, valid)

    @abc.abstractmethod
    def evaluate(self, y: PyTree, t: Array, params: Params, valid: Array) -> PyTree:
        """The function's value; where `valid` is False, what freezes the sample."""


def split_state(y: Array, n: int) -> tuple[Array, Array]:
    """(q, q̇) from the flat state y = [q; q̇] (also along a leading time axis)."""
    return y[..., :n], y[..., n:]


class _VectorField(AbstractStateFunction):
    """y = [q; q̇] ↦ [q̇; q̈] for diffrax.

    The state is one flat array rather than the pytree (q, q̇): diffrax then runs each
    Runge–Kutta stage, error norm and step update as single fused operations instead of one
    per leaf, which halves the per-step overhead of a small mechanism.
    """

    formulation: AbstractFormulation
    stabilization: AbstractStabilization

    def evaluate(self, y, t, params, valid):
        q, qd = split_state(y, self.structure.n)
        M, Q, C, gamma, *_ = equation_terms(
            self.mechanism, self.formulation, self.stabilization, q, qd, t, params
        )
        qdd = self.formulation.accelerations(M, Q, C, gamma, self.mechanism)
        # An invalid sample is frozen (zero field), so it finishes at once inside a batch.
        return jnp.where(valid, jnp.concatenate([qd, qdd]), 0.0)


class _Projector(AbstractStateFunction):
    """y = [q; q̇] ↦ the stabilisation's projection of (q, q̇) and whether it holds
    (`AbstractStabilization.project_checked`; a frozen sample always does)."""

    stabilization: AbstractStabilization

    def evaluate(self, y, t, params, valid):
        q, qd = split_state(y, self.structure.n)
        q, qd, holds = self.stabilization.project_checked(self.mechanism, q, qd, t, params)
        return jnp.where(valid, jnp.concatenate([q, qd]), y), holds | ~valid


class AllCoordinates(AbstractStateSpace):
    """Integrate all coordinates and velocities, y = [q; q̇], with q̈ from a formulation
    (the index-1 form, Pękal–Frączek 2016, eq 2.5, as an ODE).

    **Arguments:**

    - `formulation`: a `jaxmbs.AbstractFormulation` or its name (`jaxmbs.METHODS`).
    """

    formulation: AbstractFormulation

    def __init__(self, formulation: str | AbstractFormulation = "qr"):
        self.formulation = get_formulation(formulation)

    @property
    def name(self) -> str:
        return self.formulation.name

    def initial_state(self, mechanism, q0, qd0, t0, params, consistency_tol):
        return jnp.concatenate([q0, qd0]), jnp.ones((), bool)

    def vector_field(self, mechanism, stabilization):
        return _VectorField(mechanism, self.formulation, stabilization)

    def wrap_solver(self, solver, mechanism, stabilization):
        project = stabilization.end_of_step(_Projector(mechanism, stabilization))
        return solver if project is None else ProjectedSolver(solver, project)

    def physical_state(self, mechanism, y, t, params):
        structure = mechanism.structure
        return split_state(y, structure.n)

    def outputs(self, mechanism, stabilization, y, t, params, *, interpolated=True):
        """q̈ and λ from the formulation, with M, Φ and c from the same terms."""
        q, qd = split_state(y, mechanism.structure.n)
        if interpolated:
            q, qd = stabilization.project(mechanism, q, qd, t, params)
        terms = equation_terms(mechanism, self.formulation, stabilization, q, qd, t, params)
        qdd, lam = self.formulation.multipliers(terms.M, terms.Q, terms.C, terms.gamma, mechanism)
        return Outputs(q, qd, qdd, lam, terms.M, terms.phi, terms.c)

    def singular_conditions(self, mechanism):
        """The formulation's fixed pivot block (`AbstractFormulation.pivot_condition`):
        ill-conditioned at a step's end, or its signed condition changed sign in a step."""
        structure = mechanism.structure
        probe = jax.ShapeDtypeStruct((structure.n_constraints, structure.n), jnp.result_type(float))
        condition = self.formulation.pivot_condition
        if jax.eval_shape(lambda C: condition(C, mechanism), probe) is None:
            return ()

        @jax.jit
        def pivot(t, y, args):
            params, valid = jax.lax.stop_gradient(args)
            q = jax.lax.stop_gradient(y[: structure.n])
            indicator, ill = condition(constraint_jacobian(mechanism, q, t, params), mechanism)
            return jnp.where(valid, indicator, 1.0), ill & valid

        def pivot_ill_conditioned(t, y, args, **kwargs):
            return pivot(t, y, args)[1]

        def pivot_indicator(t, y, args, **kwargs):
            return pivot(t, y, args)[0]

        return (pivot_ill_conditioned, pivot_indicator)
