"""Constraint stabilisation: none, Baumgarte, and projection after each accepted step.

Integrating C q̈ = Γ alone lets Φ and Φ̇ drift (Pękal–Frączek 2016, §2). Two remedies:

- Baumgarte: replace Γ by Γ̄ = Γ − 2α ċ − β² Φ, with ċ the velocity-level residual c
  (its holonomic rows are Φ̇) and Φ zero-padded over the Pfaffian rows.
- Projection: after every accepted step, chord Newton iterations on Φ(q, t) = 0 with the
  M-weighted minimum-norm correction

      Δq = −M⁻¹Φ_qᵀ (Φ_q M⁻¹ Φ_qᵀ)⁻¹ Φ,

  Φ_q and M taken at the step's end state and factorised once, then the velocity projection
  Δq̇ = −M⁻¹Cᵀ (C M⁻¹ Cᵀ)⁻¹ c (c is linear in q̇), with the same factors where the rows
  agree. It wraps the diffrax solver, so the step's own error estimate still drives
  step-size control. Its derivative is that of the converged projection (`project_state`),
  not of the iterations. A projection that leaves max |Φ| above its tolerance
  (`Projection.holds`: `Projection.tolerance`, or √ε · max(1, |q|) without one) — a step too
  long for the chord iterations to converge from, e.g. at rtol = atol = 1 — rejects the step,
  whose error estimate becomes infinite: the controller shortens it, and where no step is
  short enough the run ends as a failed step instead of reporting a state off Φ = 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.types import Array, Coordinates, Params, Velocities
from ..kinematics import algebra
from ..kinematics.constraints import (
    constraint_residuals,
    position_residual,
    stored_constraint_jacobian,
    velocity_residual,
)

if TYPE_CHECKING:
    from ..model import Mechanism


def _corrector(
    mechanism: Mechanism, rows: tuple[int, ...], q: Coordinates, t, params
) -> Callable[[Array], Array]:
    """correct(residual) = −M⁻¹J_Rᵀ(J_R M⁻¹ J_Rᵀ)⁻¹ residual_R: the M-weighted minimum-norm
    Δ with J_R Δ = −residual_R on the independent rows R, with M and J = C taken at q and
    factorised once, so that every further call is one more solve (the chord iterations
    of `project_state`, the velocity projection). `residual` holds the first rows of
    [Φ ; ψ] (Φ: the holonomic ones).

    This is the range-space solve of the `banded` formulation with Q = 0 and Γ = −residual,
    through the structure's algebra (`AbstractAlgebra.range_space_solver`: with the sparsity
    known, block Cholesky factors of M, small unrolled factorisations, no library calls for
    small mechanisms, an implicit derivative; else dense Cholesky factorisations).
    """
    M = algebra.mass_matrix(mechanism, q, params)
    J = stored_constraint_jacobian(mechanism, q, t, params)
    solver = mechanism.structure.algebra.range_space_solver(M, J, rows)

    def correct(residual):
        padded = jnp.zeros(J.shape[0], residual.dtype).at[: residual.shape[0]].set(residual)
        # Q = 0, written as a linear function of the residual: reverse mode transposes
        # the solve only where its whole right-hand side is linear in the input.
        no_force = jnp.broadcast_to(0.0 * padded[:1], q.shape)
        return solver(no_force, -padded)[0]

    return correct


def _newton(mechanism, q, t, params, iterations, tolerance, correct=None):
    """`iterations` steps q ← q + correct(Φ(q)) on the independent holonomic rows, with
    the corrector rebuilt at every iterate (Newton) or a given one reused (chord Newton:
    each step multiplies Φ by O(|Δq|), so from a step's drift two take it to round-off).
    With a `tolerance`, only where their max |Φ| exceeds it (`lax.cond`: skipped work in a
    single run; under `vmap` both branches run and are selected per sample). Returns the
    new q and whether the iterations ran."""
    structure = mechanism.structure
    rows = structure.independent_holonomic_rows

    def newton_step(_, q):
        step = correct or _corrector(mechanism, rows, q, t, params)
        return q + step(position_residual(mechanism, q, t, params))

    def iterate(q):
        # A loop, not unrolled: traced and compiled once whatever the number of iterations
        # (static bounds: a scan, so reverse mode differentiates through it).
        return jax.lax.fori_loop(0, iterations, newton_step, q)

    if tolerance is None:
        return iterate(q), True
    drift = jnp.max(jnp.abs(position_residual(mechanism, q, t, params)[jnp.asarray(rows)]))
    projected = drift > tolerance
    return jax.lax.cond(projected, iterate, lambda q: q, q), projected


def project_positions(
    mechanism: Mechanism,
    q: Coordinates,
    t,
    params: Params,
    iterations: int = 2,
    tolerance: float | None = None,
) -> Coordinates:
    """Newton–Raphson projection of q onto Φ(q, t) = 0 (M-weighted minimum-norm steps).

    Uses the independent holonomic rows only, so redundant constraints are harmless. With a
    `tolerance`, the iterations run only when max |Φ| exceeds it.
    """
    structure = mechanism.structure
    if structure.rank_holonomic == 0:
        return q
    return _newton(mechanism, q, t, params, iterations, tolerance)[0]


def project_velocities(
    mechanism: Mechanism, q: Coordinates, qd: Velocities, t, params: Params
) -> Velocities:
    """Project q̇ onto C q̇ + b = 0 (holonomic and Pfaffian rows), M-weighted."""
    structure = mechanism.structure
    if structure.rank == 0:
        return qd
    correct = _corrector(mechanism, structure.independent_rows, q, t, params)
    return qd + correct(velocity_residual(mechanism, q, qd, t, params))


class AbstractStabilization(eqx.Module):
    """How the drift of Φ and c is controlled during integration.

    A stabilisation acts through these methods; the integrators call all of them and never
    ask which stabilisation they hold (the defaults do nothing).
    """

    name: ClassVar[str]

    def stabilized_gamma(self, gamma: Array, c: Array, phi: Array) -> Array:
        """Γ̄ used in C q̈ = Γ̄ from Γ, the velocity residual c and the position residual Φ
        (default: Γ unchanged)."""
        return gamma

    def end_of_step(self, project: Callable) -> Callable | None:
        """What to do with each accepted step's end state, given the integrator's projection
        `project(t, y, args) -> (y, holds)`: that map, or None for nothing (the default). The state
        space applies it in its one solver wrapper (`jaxmbs.integrate.solvers`)."""
        return None

    def project(
        self, mechanism: Mechanism, q: Coordinates, qd: Velocities, t,
        params: Params,) -> tuple[Coordinates, Velocities]:  # fmt: skip
        """A state (q, q̇) moved onto the position and velocity manifolds, after a step and at
        the output times (default: unchanged)."""
        return q, qd

    def project_positions(
        self, mechanism: Mechanism, q: Coordinates, t, params: Params
    ) -> Coordinates:
        """q moved onto Φ = 0, for integrators whose velocities satisfy the constraints by
        construction (default: unchanged)."""
        return q

    def holds(self, mechanism: Mechanism, q: Coordinates, t, params: Params) -> Array:
        """Whether a state the stabilisation projected at a step's end lies on Φ = 0 to its
        tolerance; where it does not, the step is rejected (default: True)."""
        return jnp.ones((), bool)

    def project_checked(
        self, mechanism: Mechanism, q: Coordinates, qd: Velocities, t, params: Params
    ) -> tuple[Coordinates, Velocities, Array]:
        """`project` and `holds` of the projected state together, as a step's end needs
        them (default: one after the other)."""
        q, qd = self.project(mechanism, q, qd, t, params)
        return q, qd, self.holds(mechanism, q, t, params)

    def lapack_free(self, mechanism: Mechanism) -> bool:
        """Whether the stabilisation calls no LAPACK routine for this structure (see
        `jaxmbs.lapack_free`; default: it calls none)."""
        return True


class NoStabilization(AbstractStabilization):
    """Integrate C q̈ = Γ as it is; the drift is reported in the Solution's residuals."""

    name: ClassVar[str] = "none"


class Baumgarte(AbstractStabilization):
    """Γ̄ = Γ − 2α c − β² Φ (Pękal–Frączek 2016, §2; α = β ∈ ⟨1, 20⟩ is usual)."""

    name: ClassVar[str] = "baumgarte"
    alpha: float = 10.0
    beta: float = 10.0

    def stabilized_gamma(self, gamma, c, phi):
        phi_padded = jnp.concatenate([phi, jnp.zeros(c.shape[0] - phi.shape[0], c.dtype)])
        return gamma - 2.0 * self.alpha * c - self.beta**2 * phi_padded


class Projection(AbstractStabilization):
    """Position and velocity projection after each accepted step.

    **Arguments:**

    - `iterations`: chord Newton iterations per projection (each multiplies Φ by O(|Δq|):
      from a step's local error, two take it to round-off).
    - `tolerance`: run the Newton iterations only when max |Φ| exceeds it (the paper's
      variant, Pękal–Frączek 2016 §2); `None` (default): after every step. The velocity
      projection (exact, one linear solve) always runs.
    """

    name: ClassVar[str] = "projection"
    iterations: int = eqx.field(default=2, static=True)
    tolerance: float | None = eqx.field(default=None, static=True)

    def end_of_step(self, project):
        return project

    def project(self, mechanism, q, qd, t, params):
        return project_state(mechanism, (q, qd), t, params, self.iterations, self.tolerance)

    def project_positions(self, mechanism, q, t, params):
        return project_positions(mechanism, q, t, params, self.iterations, self.tolerance)

    def holds(self, mechanism, q, t, params):
        """max |Φ_R(q)| ≤ `tolerance`, or ≤ √ε · max(1, |q|) without one (R: the independent
        holonomic rows): after a step whose drift the iterations can remove, the drift left
        is round-off, many orders below."""
        return self._within(mechanism, position_residual(mechanism, q, t, params), q)

    def project_checked(self, mechanism, q, qd, t, params):
        """The projection and `holds` with Φ(q⁺) from the velocity projection's jvp (the
        primal output of the jvp that gives c)."""
        q, qd, phi = projection(mechanism, (q, qd), t, params, self.iterations, self.tolerance)
        return q, qd, self._within(mechanism, phi, q)

    def _within(self, mechanism, phi, q):
        """`holds` for the position residual Φ(q)."""
        structure = mechanism.structure
        if structure.rank_holonomic == 0:
            return jnp.ones((), bool)
        drift = jnp.max(jnp.abs(phi[jnp.asarray(structure.independent_holonomic_rows)]))
        if self.tolerance is not None:
            return drift <= self.tolerance
        eps = jnp.finfo(q.dtype).eps
        return drift <= jnp.sqrt(eps) * jnp.maximum(1.0, jnp.max(jnp.abs(q)))

    def lapack_free(self, mechanism):
        structure = mechanism.structure
        return structure.algebra.lapack_free(structure.independent_holonomic_rows)


STABILIZATIONS: dict[str, type[AbstractStabilization]] = {
    cls.name: cls for cls in (NoStabilization, Baumgarte, Projection)
}


def get_stabilization(stabilization: str | AbstractStabilization) -> AbstractStabilization:
    """Look up a stabilisation by name, or pass an instance through."""
    if isinstance(stabilization, AbstractStabilization):
        return stabilization
    try:
        return STABILIZATIONS[stabilization]()
    except KeyError:
        raise ValueError(
            f"unknown stabilization {stabilization!r}; choose one of {tuple(STABILIZATIONS)}"
        ) from None


def project_state(mechanism, y, t, params, iterations: int = 2, tolerance=None):
    """Project a state (q, q̇) after a step onto the position and velocity manifolds
    (`projection`'s (q⁺, q̇⁺))."""
    return projection(mechanism, y, t, params, iterations, tolerance)[:2]


def projection(mechanism, y, t, params, iterations: int = 2, tolerance=None):
    """(q⁺, q̇⁺, Φ(q⁺)): a state (q, q̇) projected after a step onto the position and velocity
    manifolds, and the position residual left there (for `holds`, a decision: it carries a
    zero tangent).

    Chord Newton: Φ_q and M are factorised once at the step's end state. Without Pfaffian
    rows the same factors then serve the velocity projection, after which |c(q, q̇)| is
    O(|Δq|) times the velocity drift (round-off after a step): one factorisation per step
    instead of one per iteration and one for the velocities.

    The derivative is that of the projection at its converged point, not of the iterations
    (a custom JVP, so reverse mode transposes it): with P(r) = −M⁻¹J_Rᵀ(J_R M⁻¹J_Rᵀ)⁻¹ r_R
    the correction operator, the projected state q⁺ satisfies Φ(q⁺, t; θ) = 0 and moves
    along P, so

        dq⁺ = dq + P(Φ_q dq + Φ_t dt + Φ_θ dθ),    dq̇⁺ = dq̇ + P(dc),

    dc the differential of c(t, q⁺, q̇; θ) along (dt, dq⁺, dq̇, dθ). This drops the
    derivatives of M⁻¹J_Rᵀ times the multipliers of the correction, which are of the size
    of the drift being removed (the step's local error); one linear solve per output
    replaces the differentiation of every Newton iteration and of the factorisations.
    """
    structure = mechanism.structure
    if structure.rank == 0:
        return (*y, position_residual(mechanism, y[0], t, params))

    @jax.custom_jvp
    def project(t, q, qd, params):
        q1, qd1, phi1, *_ = _project_state(mechanism, q, qd, t, params, iterations, tolerance)
        return q1, qd1, phi1

    @project.defjvp
    def project_jvp(primals, tangents):
        t, q, qd, params = primals
        dt, dq, dqd, dparams = tangents
        q1, qd1, phi1, correct_q, correct_v, projected = _project_state(
            mechanism, q, qd, t, params, iterations, tolerance
        )
        if structure.rank_holonomic:
            _, dphi = jax.jvp(
                lambda t_, q_, p_: position_residual(mechanism, q_, t_, p_),
                (t, q1, params),
                (dt, dq, dparams),
            )
            dq = jnp.where(projected, dq + correct_q(dphi), dq)
        _, dc = jax.jvp(
            lambda t_, q_, qd_, p_: velocity_residual(mechanism, q_, qd_, t_, p_),
            (t, q1, qd, params),
            (dt, dq, dqd, dparams),
        )
        return (q1, qd1, phi1), (dq, dqd + correct_v(dc), jnp.zeros_like(phi1))

    q, qd = y
    t = jnp.asarray(t, dtype=q.dtype)
    return project(t, q, qd, params)


def _project_state(mechanism, q, qd, t, params, iterations, tolerance):
    """`projection`'s iterations: (q⁺, q̇⁺), Φ(q⁺) (the primal output of the jvp that gives
    the velocity residual), the correctors used for positions and for velocities, and
    whether the positions were projected (False where a `tolerance` skipped them)."""
    structure = mechanism.structure
    rows = structure.independent_holonomic_rows
    if structure.rank_holonomic == 0:
        correct_v = _corrector(mechanism, structure.independent_rows, q, t, params)
        phi, c = constraint_residuals(mechanism, q, qd, t, params)
        return q, qd + correct_v(c), phi, None, correct_v, False
    correct_q = _corrector(mechanism, rows, q, t, params)
    q, projected = _newton(mechanism, q, t, params, iterations, tolerance, correct_q)
    correct_v = correct_q
    if rows != structure.independent_rows:
        correct_v = _corrector(mechanism, structure.independent_rows, q, t, params)
    phi, c = constraint_residuals(mechanism, q, qd, t, params)
    return q, qd + correct_v(c), phi, correct_q, correct_v, projected
