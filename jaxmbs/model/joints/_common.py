"""What the planar and spatial joint builders share: parameter specs, constraint groups,
cos φ, sin φ evaluated once per angle (`cos_sin`), and the check that a reference
configuration is not singular (`warn_if_singular`)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..._internal.types import Array
from ...kinematics.constraints import constraint_jacobian, position_residual
from ...kinematics.structure import RANK_RTOL, analyze_structure
from ..mechanism import Mechanism

Spec = Any  # a number / array, a key into the parameter dict, or a callable p -> value


@dataclasses.dataclass(frozen=True)
class PointPair:
    """The fields of a joint between point_i on body_i and point_j on body_j (body `None`:
    the ground, whose local coordinates are global ones)."""

    name: str
    body_i: int | None
    point_i: Spec
    body_j: int | None
    point_j: Spec


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


@jax.custom_jvp
def cos_sin(angle: Array) -> tuple[Array, Array]:
    """(cos φ, sin φ), computed once and stored, for every order of derivative.

    JAX differentiates cos φ into a new −sin φ · φ̇ (and sin φ into cos φ · φ̇), so the
    Jacobian-vector products behind C and Γ (jvp of jvp) hold fresh trigonometric calls.
    XLA's CPU backend fuses each into its consumers and evaluates it once per consumer
    entry: 80 evaluations per sample instead of 6 in the vmapped four-bar's C and Γ, over
    half of their time. Here the tangents reuse the stored values,
    d(cos φ, sin φ) = (−sin φ, cos φ) φ̇, and the derivative of that rule calls `cos_sin`
    again, so no order of derivative adds a trigonometric call; the pair is stacked into one
    array behind an optimisation barrier, which keeps it one kernel of its own (neither the
    barrier on the two arrays nor the stack alone did). Measured (1024 samples, one core):
    vmapped four-bar C, Q, M, Γ 270 → 190 µs; single chain N = 50 right-hand side
    30 → 26 µs, McPherson 56 → 49 µs (`banded`).
    """
    both = lax.optimization_barrier(jnp.stack([jnp.cos(angle), jnp.sin(angle)]))
    return both[0], both[1]


@cos_sin.defjvp
def _cos_sin_jvp(primals, tangents):
    (angle,), (dangle,) = primals, tangents
    c, s = cos_sin(angle)
    return (c, s), (-s * dangle, c * dangle)


#: Distance of the configurations near a reference one at which its rank is compared
#: (`warn_if_singular`), relative to the largest coordinate (at least 1).
NEARBY_STEP = 1e-3
#: How many of them.
NEARBY_SAMPLES = 2
#: Newton steps at most that take one back onto the constraint manifold.
NEWTON_STEPS = 6


def warn_if_singular(mechanism: Mechanism, reference_q, reference_t: float = 0.0) -> None:
    """Warn when `reference_q` is a singular configuration of the mechanism.

    The constraint structure (rank r of C, the independent rows, s = n − r degrees of
    freedom) is analysed once, at the reference configuration (`Mechanism(reference_q=…)`,
    `analyze_structure`), and every formulation takes it as the mechanism's. At a singular
    configuration — a branch point, links in line — C loses rank there alone: r is too small
    and the redundancy m + h − r it reports is not the mechanism's. Redundancy that holds all
    along the constraint manifold (a duplicated joint, a planar loop of spatial joints) keeps
    the rank at every assembled configuration, while off the manifold the rank is generally
    higher; so r is compared with the rank at `NEARBY_SAMPLES` assembled configurations near
    the reference: a step of `NEARBY_STEP` along a random direction of the null space of
    Φ_q, taken back onto Φ = 0 by minimum-norm Newton steps (as `assemble`), analysed by
    `analyze_structure`. A higher rank there is warned about (`UserWarning`), naming both;
    a neighbour not assembled in `NEWTON_STEPS` steps, or whose rank is ill-determined, is
    left out. Where C has full rank at the reference (r = min(m + h, n)) no configuration
    has a higher one and nothing is computed.

    **Arguments:** the built `mechanism` (its `structure` analysed at `reference_q`), the
    reference configuration and its time.
    """
    structure = mechanism.structure
    if structure is None or structure.rank == min(structure.n_constraints, structure.n):
        return
    t, p, m = reference_t, mechanism.params, structure.n_holonomic
    # Called as `analyze_structure` calls it, so both use one compilation.
    jacobian, residual = eqx.filter_jit(constraint_jacobian), eqx.filter_jit(position_residual)
    q_ref = jnp.asarray(reference_q, dtype=float)
    tangents = np.eye(mechanism.n)
    if m:  # the right singular vectors past rank Φ_q span its null space
        holonomic = np.asarray(jacobian(mechanism, q_ref, t, p))[:m]
        tangents = np.linalg.svd(holonomic)[2][structure.rank_holonomic :]
    scale = max(1.0, float(jnp.max(jnp.abs(q_ref))))
    tol = 1000 * float(jnp.finfo(q_ref.dtype).eps) * scale  # `assemble`'s
    rng = np.random.default_rng(0)
    nearby = []
    for _ in range(NEARBY_SAMPLES):
        direction = rng.standard_normal(tangents.shape[0]) @ tangents
        q = q_ref + NEARBY_STEP * scale * direction / np.linalg.norm(direction)
        for _ in range(NEWTON_STEPS):
            phi = np.asarray(residual(mechanism, q, t, p))
            if np.max(np.abs(phi), initial=0.0) <= tol:
                break
            C = np.asarray(jacobian(mechanism, q, t, p))[:m]
            q = q - np.linalg.pinv(C, rcond=RANK_RTOL) @ phi
        else:
            continue  # not assembled: no neighbour to compare with
        try:
            nearby.append(analyze_structure(mechanism, q, t, sparsity=False).rank)
        except ValueError:  # a rank that the pivots and the SVD disagree on
            continue
    if nearby and max(nearby) > structure.rank:
        warnings.warn(
            f"reference_q is a singular configuration: C has rank {structure.rank} there and "
            f"rank {max(nearby)} at assembled configurations nearby, so the structure "
            f"analysed at it ({structure.redundancy} redundant rows, {structure.dof} degrees "
            "of freedom) is not the mechanism's: choose a generic configuration as reference_q",
            stacklevel=3,
        )
