"""Shape-annotated array aliases used across jaxmbs (checked at runtime in tests only)."""

from typing import Any

from jaxtyping import Array, ArrayLike, Float, PyTree

Params = Any  # a pytree of floats: masses, inertias, lengths, stiffnesses…
Scalar = Float[ArrayLike, ""]
Coordinates = Float[Array, " n"]
Velocities = Float[Array, " n"]
MassMatrix = Float[Array, "n n"]
GeneralizedForces = Float[Array, " n"]
ConstraintJacobian = Float[Array, "k n"]
ConstraintVector = Float[Array, " k"]

__all__ = [
    "Array",
    "ArrayLike",
    "Coordinates",
    "ConstraintJacobian",
    "ConstraintVector",
    "GeneralizedForces",
    "MassMatrix",
    "Params",
    "PyTree",
    "Scalar",
    "Velocities",
]
