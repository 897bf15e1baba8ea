"""Constraint kinematics by automatic differentiation — the one place C and Γ come from.

Holonomic constraints Φ(q, t) = 0 and Pfaffian constraints ψ = A(q, t) q̇ + a(q, t) = 0 are
stacked at velocity level (Wojtyra–Frączek 2013, eqs 1–9):

    c(t, q, q̇) = [Φ_q q̇ + Φ_t ; ψ(t, q, q̇)] = C(q, t) q̇ + b(q, t),

which is linear in q̇. Then the constraint Jacobian is C = ∂c/∂q̇ and differentiating
c = 0 once more in time gives the acceleration equation (Pękal–Frączek 2016, eq 2.4)

    C q̈ = Γ,    Γ = −(∂c/∂q · q̇ + ∂c/∂t),

which is a single Jacobian-vector product of c along (q̇, 1) with q̇ held fixed.
No Hessian is materialised and nobody writes a Jacobian by hand.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._internal.checks import state_vector
from .._internal.types import (
    Array,
    ConstraintJacobian,
    ConstraintVector,
    Coordinates,
    Model,
    Params,
    Velocities,
)
from .algebra import algebra_of
from .compressed import StoredJacobian


def _params(mechanism: Model, q, params: Params | None) -> Params:
    """The parameters (default: the mechanism's), after checking that q is one state."""
    state_vector(mechanism, q)
    return mechanism.params if params is None else params


def position_residual(
    mechanism: Model, q: Coordinates, t=0.0, params: Params | None = None
) -> Array:
    """Holonomic constraint residual Φ(q, t), shape (m,) (empty when there are none).

    Arguments in `simulate`'s order (state, then time, then the parameters, by default the
    mechanism's)."""
    params = _params(mechanism, q, params)
    if mechanism.constraints is None:
        return jnp.zeros((0,), dtype=q.dtype)
    return jnp.asarray(mechanism.constraints(t, q, params))


def velocity_residual(
    mechanism: Model, q: Coordinates, qd: Velocities, t=0.0, params: Params | None = None
) -> ConstraintVector:
    """Stacked velocity-level constraints c = [Φ_q q̇ + Φ_t ; ψ], shape (m + h,)."""
    return constraint_residuals(mechanism, q, qd, t, _params(mechanism, q, params))[1]


def constraint_residuals(
    mechanism: Model, q: Coordinates, qd: Velocities, t, params: Params
) -> tuple[Array, ConstraintVector]:
    """(Φ, c) at one state, from one jvp: Φ is the primal output of the jvp that gives
    Φ_q q̇ + Φ_t."""
    phi = jnp.zeros((0,), dtype=q.dtype)
    parts = []
    if mechanism.constraints is not None:
        t = jnp.asarray(t, dtype=q.dtype)
        phi, phi_dot = jax.jvp(
            lambda t_, q_: jnp.asarray(mechanism.constraints(t_, q_, params)),
            (t, q),
            (jnp.ones_like(t), qd),
        )
        parts.append(phi_dot)
    if mechanism.velocity_constraints is not None:
        parts.append(jnp.asarray(mechanism.velocity_constraints(t, q, qd, params)))
    c = jnp.concatenate(parts) if parts else jnp.zeros((0,), dtype=q.dtype)
    return phi, c


def residuals_and_gamma(
    mechanism: Model, q: Coordinates, qd: Velocities, t, params: Params
) -> tuple[Array, ConstraintVector, ConstraintVector]:
    """Φ, c and Γ in C q̈ = Γ (Pękal–Frączek 2016, eq 2.4) together: Γ is minus the time
    derivative of c along the motion at frozen q̇ (one jvp, whose primal outputs are Φ and c
    themselves)."""
    t = jnp.asarray(t, dtype=q.dtype)
    (phi, c), (_, c_dot) = jax.jvp(
        lambda t_, q_: constraint_residuals(mechanism, q_, qd, t_, params),
        (t, q),
        (jnp.ones_like(t), qd),
    )
    return phi, c, -c_dot


def constraint_jacobian(
    mechanism: Model, q: Coordinates, t=0.0, params: Params | None = None
) -> ConstraintJacobian:
    """C = ∂c/∂q̇, shape (m + h, n): Φ_q stacked over the Pfaffian matrix A, dense.

    By the mechanism's algebra (`jaxmbs.kinematics.algebra`): with the structure's sparsity
    pattern known, one Jacobian-vector product per column colour instead of n.
    """
    params = _params(mechanism, q, params)
    return algebra_of(mechanism).jacobian(
        lambda qd: velocity_residual(mechanism, q, qd, t, params), jnp.zeros_like(q)
    )


def stored_constraint_jacobian(
    mechanism: Model, q: Coordinates, t, params: Params
) -> StoredJacobian:
    """C in the form the mechanism's algebra reads it (`AbstractAlgebra.stored_jacobian`):
    its probes along the column colours where that pays (`jaxmbs.kinematics.compressed`),
    else the dense matrix."""
    return algebra_of(mechanism).stored_jacobian(
        lambda qd: velocity_residual(mechanism, q, qd, t, params), jnp.zeros_like(q)
    )


def acceleration_rhs(
    mechanism: Model, q: Coordinates, qd: Velocities, t=0.0, params: Params | None = None
) -> ConstraintVector:
    """Γ in C q̈ = Γ (Pękal–Frączek 2016, eq 2.4)."""
    params = _params(mechanism, q, params)
    return residuals_and_gamma(mechanism, q, qd, t, params)[2]
