"""Equations of motion at one state: q̈ and λ from the model through a formulation.

    M(q) q̈ + Cᵀλ = Q(t, q, q̇),    C q̈ = Γ̄    (Pękal–Frączek 2016, eqs 2.1, 2.4, 2.5)

with Γ̄ the (possibly Baumgarte-stabilised) acceleration right-hand side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax

from . import inertia
from ._types import Array, Coordinates, Params, Velocities
from .formulations import AbstractFormulation, get_formulation
from .kinematics import (
    compressed_constraint_jacobian,
    constraint_jacobian,
    position_residual,
    velocity_residual_and_gamma,
)
from .stabilization import AbstractStabilization, NoStabilization
from .structure import Structure

if TYPE_CHECKING:
    from .mechanism import Mechanism


def _terms(mechanism, stabilization, t, q, qd, params, compressed: bool = False):
    """M, Q, C and Γ̄ at one state; with `compressed`, C as a `CompressedJacobian` where its
    dense form is costly (`compressed_constraint_jacobian`)."""
    M = inertia.mass_matrix(mechanism, q, params)
    Q = mechanism.forces(t, q, qd, params)
    if compressed:
        C = compressed_constraint_jacobian(mechanism, t, q, params)
    else:
        C = constraint_jacobian(mechanism, t, q, params)
    c, gamma = velocity_residual_and_gamma(mechanism, t, q, qd, params)
    if not isinstance(stabilization, NoStabilization):
        phi = position_residual(mechanism, t, q, params)
        gamma = stabilization.stabilized_gamma(gamma, phi, c)
    return M, Q, C, gamma


def resolve_structure(mechanism: Mechanism, q=None, t=0.0) -> Structure:
    """The mechanism's static structure, analysed from a concrete `q` if it has none."""
    if mechanism.structure is not None:
        return mechanism.structure
    if q is None or isinstance(q, jax.core.Tracer):
        raise ValueError(
            "the mechanism's constraint structure is unknown and q is traced: construct the "
            "Mechanism with reference_q=..., or call mechanism.with_structure(q) outside jit"
        )
    return mechanism.with_structure(q, t).structure


def accelerations(
    mechanism: Mechanism,
    t,
    q: Coordinates,
    qd: Velocities,
    params: Params | None = None,
    *,
    method: str | AbstractFormulation = "qr",
    stabilization: AbstractStabilization | None = None,
    structure: Structure | None = None,
) -> Array:
    """Accelerations q̈ at one state (no multipliers)."""
    params = mechanism.params if params is None else params
    structure = structure or resolve_structure(mechanism, q, t)
    stabilization = stabilization or NoStabilization()
    M, Q, C, gamma = _terms(mechanism, stabilization, t, q, qd, params)
    return get_formulation(method).accelerations(M, Q, C, gamma, structure)


def accelerations_and_multipliers(
    mechanism: Mechanism,
    t,
    q: Coordinates,
    qd: Velocities,
    params: Params | None = None,
    *,
    method: str | AbstractFormulation = "qr",
    stabilization: AbstractStabilization | None = None,
    structure: Structure | None = None,
) -> tuple[Array, Array]:
    """Accelerations q̈ and minimum-norm Lagrange multipliers λ (rows of [Φ ; ψ]) at one state.

    Sign convention: M q̈ + Cᵀλ = Q, so Cᵀλ is minus the generalized constraint reaction.
    """
    params = mechanism.params if params is None else params
    structure = structure or resolve_structure(mechanism, q, t)
    stabilization = stabilization or NoStabilization()
    M, Q, C, gamma = _terms(mechanism, stabilization, t, q, qd, params)
    return get_formulation(method).multipliers(M, Q, C, gamma, structure)
