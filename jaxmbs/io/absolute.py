"""The imported tree in absolute coordinates: one Euler-parameter body per moving MuJoCo body,
the joints and the `connect` closures as constraints (`from_mjcf(coordinates="absolute")`).

Each moving body becomes a `jaxmbs.model.joints.spatial.Body` whose frame is its principal
frame of inertia (centre of mass, MuJoCo's `ipos`/`iquat`), so its inertia is the diagonal
of principal moments (the same parameters `"<body>.mass"`, `"<body>.inertia"`). Each joint's
anchor and axis are taken at the reference configuration `qpos0` and written in both
bodies' principal frames; a hinge becomes a spatial `Revolute` (5 rows), a slide a
`Translational` (5 rows), a ball a `Spherical` (3 rows), a free joint nothing; a `connect`
a `Spherical` between its bodies. A hinge's damping and spring become a
`RotationalSpringDamper` about its axis whose angle is 0 at `qpos0`, so its free angle is
springref − ref. The slice mapped here: one joint per moving body, no armature, no
springs or dampers on slides, balls or free joints, no welds, joint equalities or actuators;
anything else is refused with a `ValueError` naming it.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Array
from ..kinematics import analyze_structure
from ..model.joints import forces, spatial
from ..model.joints.orientation import body_rate_matrix, euler_parameters
from ..model.mechanism import Mechanism
from .tree import BALL, FREE, HINGE, SLIDE, Tree, param_key


def _perpendicular(axis: np.ndarray) -> np.ndarray:
    """A unit vector perpendicular to `axis` (the coordinate axis least aligned, crossed)."""
    helper = np.eye(3)[np.argmin(np.abs(axis))]
    u = np.cross(axis, helper)
    return u / np.linalg.norm(u)


def absolute_mechanism(
    tree: Tree, params: dict, q_ref: Array, label: str
) -> tuple[Mechanism, tuple[int, ...]]:
    """The mechanism in absolute coordinates and, per body of it, the MuJoCo body index."""
    moving = sorted({j.body for j in tree.joints})
    for b in range(1, len(tree.body_names)):
        if b not in moving and _moving_ancestor(tree, b, moving):
            raise ValueError(
                f"{label}: absolute coordinates need a joint on every moving body; body "
                f"{tree.body_names[b]!r} has none (use the joint coordinates)"
            )
    index = {b: k for k, b in enumerate(moving)}
    com, irot = (np.asarray(a) for a in jax.jit(tree.inertial_frames)(q_ref))
    frame_x, frame_R = (np.asarray(a) for a in jax.jit(tree.frames)(q_ref))

    def local(b: int, world_point: np.ndarray) -> tuple[int | None, np.ndarray]:
        if b not in index:  # ground: a static body's points are world points
            return None, world_point
        return index[b], irot[b].T @ (world_point - com[b])

    def local_vector(b: int, world_vector: np.ndarray) -> np.ndarray:
        return world_vector if b not in index else irot[b].T @ world_vector

    def refuse(what: str) -> None:
        raise ValueError(f"{label}: absolute coordinates do not map {what} (use the joints')")

    bodies = [
        spatial.Body(
            tree.body_names[b],
            param_key(tree.body_names[b], "mass"),
            param_key(tree.body_names[b], "inertia"),
        )
        for b in moving
    ]
    joints, elements = [], []
    seen: set[int] = set()
    for j, spring in zip(tree.joints, tree.springs, strict=True):
        if j.body in seen:
            refuse(f"body {tree.body_names[j.body]!r}'s second joint {j.name!r}")
        seen.add(j.body)
        arm = np.atleast_1d(np.asarray(params[param_key(j.name, "armature")]))
        damping = np.atleast_1d(np.asarray(params[param_key(j.name, "damping")]))
        stiff = float(params[param_key(j.name, "stiffness")]) if spring else 0.0
        if np.any(arm != 0):
            refuse(f"the armature of joint {j.name!r}")
        if j.kind != HINGE and (np.any(damping != 0) or stiff != 0):
            refuse(f"the damping or spring of {j.kind} joint {j.name!r}")
        if j.kind == FREE:
            continue
        parent = tree.parent[j.body]
        anchor = frame_x[j.body] + frame_R[j.body] @ j.pos
        axis = frame_R[j.body] @ j.axis
        body_i, point_i = local(parent, anchor)
        body_j, point_j = local(j.body, anchor)
        if j.kind == BALL:
            joints.append(spatial.Spherical(j.name, body_i, point_i, body_j, point_j))
            continue
        axis_i, axis_j = local_vector(parent, axis), local_vector(j.body, axis)
        if j.kind == SLIDE:
            normal = _perpendicular(axis)
            joints.append(
                spatial.Translational(
                    j.name,
                    body_i,
                    point_i,
                    axis_i,
                    local_vector(parent, normal),
                    body_j,
                    point_j,
                    axis_j,
                    local_vector(j.body, normal),
                )  # fmt: skip
            )
            continue
        joints.append(spatial.Revolute(j.name, body_i, point_i, axis_i, body_j, point_j, axis_j))
        if np.any(damping != 0) or spring:
            normal = _perpendicular(axis)
            ref, key = float(j.ref[0]), param_key(j.name, "springref")
            elements.append(
                forces.RotationalSpringDamper(
                    j.name,
                    stiffness=param_key(j.name, "stiffness") if spring else 0.0,
                    damping=param_key(j.name, "damping"),
                    body_i=body_i,
                    body_j=body_j,
                    free_angle=lambda p, key=key, ref=ref: p[key] - ref,
                    axis_i=axis_i,
                    reference_i=local_vector(parent, normal),
                    reference_j=local_vector(j.body, normal),
                )
            )
    for c in tree.closures:
        if c.kind != "connect":
            refuse(f"the {c.kind} equality {c.name!r}")
        points = []
        for b, p in ((c.body1, c.point1), (c.body2, c.point2)):
            points.append(local(b, frame_x[b] + frame_R[b] @ p))
        (b1, p1), (b2, p2) = points
        joints.append(spatial.Spherical(c.name, b1, p1, b2, p2))
    if tree.actuators:
        refuse(f"the actuators {[a.name for a in tree.actuators]}")
    reference = jnp.asarray(absolute_state(tree, moving, q_ref))
    mech = spatial.spatial_mechanism(bodies, joints, params, gravity="gravity", elements=elements)
    # the builder's reference_q would evaluate M op by op (seconds); one compiled call instead
    M = np.asarray(eqx.filter_jit(lambda m, q: m.mass_matrix(q, m.params))(mech, reference))
    if not np.all(np.linalg.eigvalsh((M + M.T) / 2) > 0):
        raise ValueError(f"{label}: the mass matrix at qpos0 is not positive definite")
    return mech.replace_structure(analyze_structure(mech, reference)), tuple(moving)


def _moving_ancestor(tree: Tree, b: int, moving: list[int]) -> bool:
    while b:
        b = tree.parent[b]
        if b in moving:
            return True
    return False


def absolute_state(tree: Tree, moving, q: Array, qd: Array | None = None):
    """The absolute coordinates (centre of mass, Euler parameters of the principal frame)
    of every moving body at joint coordinates q, and with q̇ their rates: ṙ, and
    ė = ½ G(e)ᵀ ω' with ω' the principal-frame angular velocity."""
    com, irot = (np.asarray(a) for a in jax.jit(tree.inertial_frames)(q))
    e = [euler_parameters(irot[b]) for b in moving]
    pose = np.concatenate([np.concatenate([com[b], eb]) for b, eb in zip(moving, e, strict=True)])
    if qd is None:
        return pose
    v, omega, _ = (np.asarray(a) for a in jax.jit(tree.body_velocities)(q, qd))
    rates = []
    for b, eb in zip(moving, e, strict=True):
        G = np.asarray(body_rate_matrix(eb))
        rates.append(np.concatenate([v[b - 1], 0.5 * G.T @ omega[b - 1]]))
    return pose, np.concatenate(rates)
