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

import dataclasses
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Array
from ..kinematics import analyze_structure
from ..model.joints import forces, spatial
from ..model.joints.orientation import body_rate_matrix, euler_parameters, parameter_rotation
from ..model.mechanism import Mechanism
from .tree import BALL, FREE, HINGE, SLIDE, Tree, param_key


def _perpendicular(axis: np.ndarray) -> np.ndarray:
    """A unit vector perpendicular to `axis` (the coordinate axis least aligned, crossed)."""
    helper = np.eye(3)[np.argmin(np.abs(axis))]
    u = np.cross(axis, helper)
    return u / np.linalg.norm(u)


@dataclasses.dataclass(frozen=True)
class _BodyFrames:
    """Where the moving bodies' inertial frames are at the reference (`index`: MuJoCo body
    → body of the mechanism; `com`, `irot`: every MuJoCo body's centre of mass and principal
    axes), and their joint frames (`frame_x`, `frame_R`)."""

    index: dict[int, int]
    com: np.ndarray
    irot: np.ndarray
    frame_x: np.ndarray
    frame_R: np.ndarray

    def point(self, b: int, world: np.ndarray) -> tuple[int | None, np.ndarray]:
        """A world point in body b's principal frame (the ground: the world point itself)."""
        if b not in self.index:  # ground: a static body's points are world points
            return None, world
        return self.index[b], self.irot[b].T @ (world - self.com[b])

    def vector(self, b: int, world: np.ndarray) -> np.ndarray:
        """A world vector in body b's principal frame."""
        return world if b not in self.index else self.irot[b].T @ world

    def joint_point(self, b: int, local: np.ndarray) -> np.ndarray:
        """A point given in body b's joint frame, in the world."""
        return self.frame_x[b] + self.frame_R[b] @ local


def _refuse(label: str, what: str) -> None:
    raise ValueError(f"{label}: absolute coordinates do not map {what} (use the joints')")


def _mapped_joint(
    j, spring: bool, params: dict, parent: int, at: _BodyFrames, label: str
) -> tuple[list, list]:
    """A tree joint as spatial joints between its body and its parent (none for a free joint),
    and a hinge's spring-damper as a force element; joints the map cannot express exactly
    (armature, a ball's or slide's spring or damper) are refused."""
    arm = np.atleast_1d(np.asarray(params[param_key(j.name, "armature")]))
    damping = np.atleast_1d(np.asarray(params[param_key(j.name, "damping")]))
    stiff = float(params[param_key(j.name, "stiffness")]) if spring else 0.0
    if np.any(arm != 0):
        _refuse(label, f"the armature of joint {j.name!r}")
    if j.kind != HINGE and (np.any(damping != 0) or stiff != 0):
        _refuse(label, f"the damping or spring of {j.kind} joint {j.name!r}")
    if j.kind == FREE:
        return [], []
    anchor = at.joint_point(j.body, j.pos)
    axis = at.frame_R[j.body] @ j.axis
    (body_i, point_i), (body_j, point_j) = at.point(parent, anchor), at.point(j.body, anchor)
    if j.kind == BALL:
        return [spatial.Spherical(j.name, body_i, point_i, body_j, point_j)], []
    axis_i, axis_j = at.vector(parent, axis), at.vector(j.body, axis)
    normal = _perpendicular(axis)
    normal_i, normal_j = at.vector(parent, normal), at.vector(j.body, normal)
    if j.kind == SLIDE:
        slide = spatial.Translational(
            j.name, body_i, point_i, axis_i, normal_i, body_j, point_j, axis_j, normal_j
        )
        return [slide], []
    hinge = spatial.Revolute(j.name, body_i, point_i, axis_i, body_j, point_j, axis_j)
    if not (np.any(damping != 0) or spring):
        return [hinge], []
    ref, key = float(j.ref[0]), param_key(j.name, "springref")
    element = forces.RotationalSpringDamper(
        j.name,
        stiffness=param_key(j.name, "stiffness") if spring else 0.0,
        damping=param_key(j.name, "damping"),
        body_i=body_i,
        body_j=body_j,
        free_angle=lambda p, key=key, ref=ref: p[key] - ref,
        axis_i=axis_i,
        reference_i=normal_i,
        reference_j=normal_j,
    )
    return [hinge], [element]


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
    com, irot = (np.asarray(a) for a in jax.jit(tree.inertial_frames)(q_ref))
    frame_x, frame_R = (np.asarray(a) for a in jax.jit(tree.frames)(q_ref))
    at = _BodyFrames({b: k for k, b in enumerate(moving)}, com, irot, frame_x, frame_R)
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
            _refuse(label, f"body {tree.body_names[j.body]!r}'s second joint {j.name!r}")
        seen.add(j.body)
        mapped, element = _mapped_joint(j, spring, params, tree.parent[j.body], at, label)
        joints += mapped
        elements += element
    for c in tree.closures:
        if c.kind != "connect":
            _refuse(label, f"the {c.kind} equality {c.name!r}")
        (b1, p1), (b2, p2) = (
            at.point(b, at.joint_point(b, p)) for b, p in ((c.body1, c.point1), (c.body2, c.point2))
        )
        joints.append(spatial.Spherical(c.name, b1, p1, b2, p2))
    if tree.actuators:
        _refuse(label, f"the actuators {[a.name for a in tree.actuators]}")
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


def body_frames(
    tree: Tree, moving: Sequence[int], q_ref: Array
) -> Callable[[Array], tuple[Array, Array]]:
    """The map q ↦ (x, R) from absolute coordinates to every MuJoCo body's frame, shapes
    (nbody, 3) and (nbody, 3, 3). Moving body k (MuJoCo's `moving[k]`) has its centre of mass
    c = q[7k : 7k + 3] and principal frame A(e), e = q[7k + 3 : 7k + 7]; as c = x + R·ipos and
    A = R·A(iquat) (`Tree.inertial_frames`), its frame is R = A·A(iquat)ᵀ, x = c − R·ipos. The
    other bodies are static: where they are at the joint coordinates q_ref."""
    x_ref, R_ref = (jnp.asarray(a) for a in jax.jit(tree.frames)(q_ref))
    index = np.asarray(moving, dtype=int)
    irot_t, ipos = np.swapaxes(tree.body_irot[index], 1, 2), tree.body_ipos[index]

    def frames(q: Array) -> tuple[Array, Array]:
        poses = q.reshape(-1, 7)
        R = parameter_rotation(poses[:, 3:]) @ irot_t
        x = poses[:, :3] - jnp.einsum("bij,bj->bi", R, ipos)
        return x_ref.at[index].set(x), R_ref.at[index].set(R)

    return frames


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
