"""Shape-annotated array aliases used across jaxmbs (checked at runtime in tests only), and
the model contract as the kinematics reads it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from jaxtyping import Array, ArrayLike, Float, PyTree

Params = Any  # a pytree of floats: masses, inertias, lengths, stiffnesses…
Scalar = Float[ArrayLike, ""]
Coordinates = Float[Array, " n"]
Velocities = Float[Array, " n"]
MassMatrix = Float[Array, "n n"]
GeneralizedForces = Float[Array, " n"]
ConstraintJacobian = Float[Array, "k n"]
ConstraintVector = Float[Array, " k"]


class Model(Protocol):
    """The model contract (`jaxmbs.Mechanism` implements it) as far as `jaxmbs.kinematics`
    reads it: sizes n, m, h, names, the parameters, the user's functions M(q, p), M(q) v,
    Φ(t, q, p), ψ(t, q, q̇, p) and the analysed structure. The kinematics depends on this
    contract rather than on `jaxmbs.model`, which analyses a mechanism's structure with the
    kinematics when it is built (`Mechanism(reference_q=…)`)."""

    n: int
    n_holonomic: int
    n_pfaffian: int
    coordinate_names: tuple[str, ...]
    params: Params
    structure: Any
    mass_matrix: Callable[..., Array]
    mass_product: Callable[..., Array] | None
    constraints: Callable[..., Array] | None
    velocity_constraints: Callable[..., Array] | None

    def with_structure(self, q, t: float = 0.0) -> Model:
        """A copy whose structure is analysed at the concrete `q`."""
        ...


__all__ = [
    "Array",
    "ArrayLike",
    "Coordinates",
    "ConstraintJacobian",
    "ConstraintVector",
    "GeneralizedForces",
    "MassMatrix",
    "Model",
    "Params",
    "PyTree",
    "Scalar",
    "Velocities",
]
