"""Inputs from data: a sampled signal — a road profile z(x), a measured force or motion over
time — as a smooth function for the model's equations.

`Profile(s, z)` interpolates the samples by a cubic spline with continuous second derivative
(interpax's `"cubic2"`), so a prescribed motion built from it has continuous accelerations
and the integrator sees no kinks between samples; beyond the samples it holds the end values.
It is differentiable in its argument (autodiff of the spline: the Γ term of a driving
constraint needs d²z/dt²).

Uses:

- a prescribed motion (a driving constraint): `planar.Driving("road", coordinate,
  motion=profile.along(speed))`, where `along` gives d(t, p) = z(s₀ + v t);
- a force input: an element's `actuator=lambda t, q, qd, p: force(t)` with
  `force = Profile(times, forces)`.
"""

from __future__ import annotations

from collections.abc import Callable

import interpax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Array
from .joints._common import Spec, value


class Profile:
    """A signal sampled at increasing `s` (distance or time) with values `z`, interpolated by
    a C² cubic spline; constant beyond the first and last sample.

    Instances compare and hash by identity (they are part of a mechanism's static model).
    """

    def __init__(self, s, z):
        s, z = np.asarray(s, dtype=float), np.asarray(z, dtype=float)
        if s.ndim != 1 or z.shape != s.shape or s.size < 4:
            raise ValueError(
                f"a profile needs matching 1-D samples (at least 4), got {s.shape} and {z.shape}"
            )
        if not np.all(np.isfinite(s)) or not np.all(np.isfinite(z)):
            raise ValueError("a profile's samples must be finite")
        if not np.all(np.diff(s) > 0):
            raise ValueError("a profile's abscissae must increase strictly")
        self.s, self.z = s, z

    def __call__(self, s) -> Array:
        """z(s), the spline between the samples and the end values beyond them."""
        inside = jnp.clip(jnp.asarray(s), self.s[0], self.s[-1])
        return interpax.interp1d(inside, self.s, self.z, method="cubic2")

    def along(self, speed: Spec, start: Spec = 0.0) -> Callable[..., Array]:
        """d(t, p) = z(s₀ + v t): the profile passed at `speed` from `start` (numbers,
        parameter keys or callables of the parameters), as a driving constraint's motion."""

        def motion(t, p):
            return self(value(start, p) + value(speed, p) * t)

        return motion
