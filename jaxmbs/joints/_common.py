"""What the planar and spatial joint builders share: parameter specs and constraint groups."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from .._types import Array

Spec = Any  # a number / array, a key into the parameter dict, or a callable p -> value


def value(spec: Spec, params) -> Array:
    """Evaluate a geometry or inertia specification against the parameters."""
    if isinstance(spec, str):
        return jnp.asarray(params[spec])
    if callable(spec):
        return jnp.asarray(spec(params))
    return jnp.asarray(spec, dtype=float)


def split_joints(joints: Sequence, n_bodies: int) -> tuple[tuple, tuple, dict]:
    """Check joint names and body indices; order holonomic joints before Pfaffian ones.

    **Returns:** `(holonomic, pfaffian, groups)` with `groups` mapping each joint name to its
    rows of the stacked constraint vector [Φ ; ψ] (one constraint group per joint).
    """
    names = [j.name for j in joints]
    if len(set(names)) != len(names):
        raise ValueError(f"joint names must be unique, got {names}")
    for j in joints:
        for b in (getattr(j, "body_i", None), getattr(j, "body_j", None), getattr(j, "body", None)):
            if b is not None and not 0 <= b < n_bodies:
                raise ValueError(f"joint {j.name!r} refers to body {b}; there are {n_bodies}")
    holonomic = tuple(j for j in joints if j.holonomic)
    pfaffian = tuple(j for j in joints if not j.holonomic)
    groups, row = {}, 0
    for j in holonomic + pfaffian:
        groups[j.name] = tuple(range(row, row + j.rows))
        row += j.rows
    return holonomic, pfaffian, groups
