"""Force elements along a motion: each element's force and the power of the non-conservative
parts, read back from a [`jaxmbs.Solution`][] (the elements' equations:
`jaxmbs.joints.forces`)."""

from __future__ import annotations

import jax

from .._internal.types import Array, Params
from ..model.mechanism import Mechanism


def _element_set(mechanism: Mechanism):
    if mechanism.elements is None:
        raise ValueError("the mechanism has no force elements (build it with elements=…)")
    return mechanism.elements


def element_forces(
    mechanism: Mechanism, solution, params: Params | None = None
) -> dict[str, Array]:
    """Each force element's force (tension positive) or torque at the solution's output
    times, an applied load's F (global frame): name → array (T,) or (T, components)."""
    elements = _element_set(mechanism)
    p = mechanism.params if params is None else params
    return jax.vmap(lambda t, q, qd: elements.forces(t, q, qd, p))(
        solution.ts, solution.q, solution.qd
    )


def element_power(mechanism: Mechanism, solution, params: Params | None = None) -> Array:
    """P(t) = −Σ f_nc δ̇, the power of the elements' dampers and force laws on the system at
    the output times (T,); −P is the dissipated power, and E(t) − E(0) = ∫₀ᵗ P dt when the
    elements, gravity and ideal constraints are all that act."""
    elements = _element_set(mechanism)
    p = mechanism.params if params is None else params
    return jax.vmap(lambda t, q, qd: elements.power(t, q, qd, p))(
        solution.ts, solution.q, solution.qd
    )
