"""Equations of motion at one state: q̈ and λ from the model through a formulation.

    M(q) q̈ + Cᵀλ = Q(t, q, q̇),    C q̈ = Γ̄    (Pękal–Frączek 2016, eqs 2.1, 2.4, 2.5)

with Γ̄ the acceleration right-hand side as the stabilisation leaves it (Baumgarte: eq of
`jaxmbs.Baumgarte`; otherwise Γ itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .._internal.checks import state_vector
from .._internal.types import Array, Coordinates, Params, Velocities
from ..formulations import AbstractFormulation, get_formulation
from ..kinematics import algebra
from ..kinematics.constraints import constraint_jacobian, residuals_and_gamma
from ..kinematics.structure import with_known_structure
from .stabilization import AbstractStabilization, NoStabilization

if TYPE_CHECKING:
    from ..model import Mechanism


class EquationTerms(NamedTuple):
    """The terms of the equations of motion at one state, and the constraint residuals that
    come with them: M, Q, C (in the form the formulation reads), Γ̄ as the stabilisation
    leaves it, Φ(q, t) and c(t, q, q̇)."""

    M: Array
    Q: Array
    C: Array
    gamma: Array
    phi: Array
    c: Array


def equation_terms(
    mechanism: Mechanism,
    formulation: AbstractFormulation | None,
    stabilization: AbstractStabilization,
    q: Coordinates,
    qd: Velocities,
    t,
    params: Params,
) -> EquationTerms:
    """M, Q, C and Γ̄ at one state, with C in the form the formulation reads
    (`AbstractFormulation.constraint_jacobian`; dense for `formulation=None`) and Γ̄ as the
    stabilisation leaves it (`AbstractStabilization.stabilized_gamma`); Φ and c come from
    the jvp that gives Γ (`residuals_and_gamma`)."""
    M = algebra.mass_matrix(mechanism, q, params)
    Q = mechanism.forces(t, q, qd, params)
    if formulation is None:
        C = constraint_jacobian(mechanism, q, t, params)
    else:
        C = formulation.constraint_jacobian(mechanism, q, t, params)
    phi, c, gamma = residuals_and_gamma(mechanism, q, qd, t, params)
    gamma = stabilization.stabilized_gamma(gamma, c, phi)
    return EquationTerms(M, Q, C, gamma, phi, c)


def accelerations_and_multipliers(
    mechanism: Mechanism,
    q: Coordinates,
    qd: Velocities,
    t=0.0,
    params: Params | None = None,
    *,
    method: str | AbstractFormulation = "auto",
    stabilization: AbstractStabilization | None = None,
    multipliers: bool = True,
) -> tuple[Array, Array | None]:
    """Accelerations q̈ and minimum-norm Lagrange multipliers λ (rows of [Φ ; ψ]) at one state.

    Sign convention: M q̈ + Cᵀλ = Q, so Cᵀλ is minus the generalized constraint reaction.
    With `multipliers=False`, λ is not computed (None).
    """
    state_vector(mechanism, q)
    state_vector(mechanism, qd, "qd")
    params = mechanism.params if params is None else params
    mechanism = with_known_structure(mechanism, q, t)
    formulation = get_formulation(method, mechanism)
    M, Q, C, gamma, *_ = equation_terms(
        mechanism, formulation, stabilization or NoStabilization(), q, qd, t, params
    )
    if not multipliers:
        return formulation.accelerations(M, Q, C, gamma, mechanism), None
    return formulation.multipliers(M, Q, C, gamma, mechanism)


def accelerations(
    mechanism: Mechanism, q: Coordinates, qd: Velocities, t=0.0, params: Params | None = None,
    **options,
) -> Array:  # fmt: skip
    """Accelerations q̈ at one state, without the multipliers; `options` (`method`,
    `stabilization`) as `accelerations_and_multipliers`."""
    return accelerations_and_multipliers(mechanism, q, qd, t, params, multipliers=False, **options)[
        0
    ]
