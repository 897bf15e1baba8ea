"""The imported tree in absolute coordinates: one Euler-parameter body per moving MuJoCo body,
the joints and the loop-closing equalities as constraints (`from_mjcf(coordinates="absolute")`).

Each moving body becomes a `jaxmbs.model.joints.spatial.Body` whose frame is its principal
frame of inertia (centre of mass, MuJoCo's `ipos`/`iquat`), so its inertia is the diagonal
of principal moments (the same parameters `"<body>.mass"`, `"<body>.inertia"`). Each joint's
anchor and axis are taken at the reference configuration `qpos0` and written in both
bodies' principal frames. A body's joints, which MuJoCo composes in order through massless
frames (`jaxmbs.io.tree`), become one joint between its parent and it (`_body_joints`):

- one hinge: a spatial `Revolute` (5 rows); one slide: a `Translational` (5); one ball: a
  `Spherical` (3); a free joint: nothing;
- two hinges with a common anchor and orthogonal axes: a `Universal` (4 rows): the first
  axis turns with the parent, the second with the body, and Rot(a₁, θ₁) Rot(a₂, θ₂) keeps
  a₁ ⟂ a₂ exactly;
- a hinge and a slide along one axis, in either order: a `Cylindrical` (4 rows): the
  hinge's anchor slides along the common axis;
- three hinges with a common anchor and independent axes: a `Spherical` (3 rows): their
  angles are a chart of the relative rotation (one that is singular where the axes line
  up; the Spherical is not);
- slides with mutually orthogonal axes and at most one hinge normal to them, before or
  after them all (`_SlidingJoint`): the rotation rows of a `Fixed` without a hinge (3
  rows), the parallel rows of a `Revolute` with one (2), and nᵀ(P_j − P_i) = 0 for each
  n of the orthogonal complement of the slides' axes (in the parent's frame, the body's
  where the slides follow the hinge): three slides 3 rows, a planar slide–slide–hinge 3,
  a hinge and a slide across it 4.

The intermediate frames are massless, so the motion is the same. Any other combination
(oblique slides, a hinge between slides, skew hinges, a ball with slides or after a hinge,
…; a three-hinge gimbal too where something acts on its hinges) is mapped in **mixed
coordinates** (`_MixedJoint`): the body keeps its centre c_b and Euler parameters e_b, and
its joints' own coordinates θ — each hinge's and slide's `qpos`, each ball's quaternion
(4, with its row θ_eᵀθ_e − 1 = 0) — follow all bodies' coordinates in q (named as
`Tree.coordinate_names` names them). One constraint group per such body (its joints' names
joined by "+") states that its frame is its parent's composed with the joints at θ, as
MuJoCo's `mj_kinematics` composes them (`jaxmbs.io.tree.joint_motion`):

    (x, R) = J_n(θ_n) ∘ … ∘ J_1(θ_1) (x_p + R_p pos, R_p quat),
    c_b − (x + R ipos) = 0,   vee(½(E − Eᵀ)) = 0 with E = (R A(iquat))ᵀ A(e_b),

6 rows (the weld's rotation rows, `Fixed`), plus a ball's normalisation; (x_p, R_p) is the
parent's frame, x_p = c_p − R_p ipos_p, R_p = A(e_p) A(iquat_p)ᵀ, or a static parent's at
`qpos0`. The bodies' kinetic energy does not reach θ, so M would be singular along it: the
builder gets the completion T_c = ½ ṙᵀ W ṙ of the group's rows' rates ṙ (W the body's
mass on the position rows, its mean principal moment J̄ on the others), as J̄ (2 eᵀė)²
completes the Euler parameters: it and its Lagrange terms vanish where the rows' velocity
and acceleration constraints hold, so the motion and the multipliers are unchanged while M
is positive definite; its Lagrange terms in closed form (`KineticCompletion`: M_c = RᵀWR,
Q_c = −RᵀW(Ṙq̇), two nested derivatives of the rows instead of three). θ carries MuJoCo's
terms directly: a hinge's or slide's spring and damper V = ½ k (θ − q_spring)², f = c θ̇
(`_JointSpringDamper`), a ball's spring on its quaternion (`_QuaternionSpring`), armature
and a ball's damping on θ̇ and ω = 2 G(θ_e) θ̇_e (`_JointCoordinate`, `_JointQuaternion`),
actuators and joint equalities on θ; `to_qpos` and `to_qvel` read θ and θ̇. A hinge's
angle is a coordinate here, not read off the bodies' poses, so its spring, servo and
equality are exact at every angle (no π window, below).
Only the bodies that need it are mixed: on the double pendulum, mixed coordinates for every
hinge (n 14 → 16) cost 2.3× the import, 2.4× the compile time of a one-second solve and 5×
its run time (rtol 1e-10, 2-core CPU, with the completion's terms then by autodiff of
T_c), for the same motion.

Each hinge's and slide's coordinate θ = q − q_ref is read off the absolute
coordinates (`_Coordinate`): a hinge's as the relative angle of the two bodies about its
axis (`spatial.relative_angle`, between vectors normal to it; a universal's second angle as
the parent's turn about the body's axis, negated), a slide's as the offset of its anchor
along its axis (after a hinge, along the body's axis: the parent's point from the body's,
negated). A hinge's damper and spring become a `RotationalSpringDamper`, a slide's an
`AxialSpringDamper`, along that coordinate (free at springref − ref). A `connect` becomes a
`Spherical`, a `weld` a `Fixed` (6 rows: the anchor points and vee(½(E − Eᵀ)) with MuJoCo's
E = (R₂F₂)ᵀ R₁F₁ R_rel, the frames F carried into the principal ones), a `joint` equality
θ₁ − Σ cₖ θ₂ᵏ = 0 on the coordinates of its joints (`_JointEquality`).

A hinge's relative angle (not in mixed coordinates) is read off the bodies' poses, which are
the same at q and q + 2π:
θ lies in (−π, π] (q in (q_ref − π, q_ref + π], q_ref its `qpos0`). MuJoCo's spring
½ k (q − q_spring)², a position actuator's force and a joint equality's polynomial are not
2π-periodic in q, so no function of the absolute coordinates alone (a force element has no
state to count turns) equals them past that window: there they act as at q ∓ 2π (the
spring's torque jumps by 2π k where q crosses q_ref ± π, its potential by
2π k |q_spring − q_ref|, so the energy is not conserved across it), an actuator whose force
depends on its length (a position servo) likewise, and a joint equality's row jumps (the
simulation stops). A damper, the armature and a motor's force act on θ̇ or not on θ at all,
exact everywhere; `to_qpos` unwraps θ along a trajectory, so a run can be checked against
the window (`docs/io.md`).

MuJoCo adds a joint's armature a to its coordinate's diagonal of the mass matrix: the
kinetic energy ½ a ⊙ v² of the joint's `qvel` v, no body's inertia. With v read off the
absolute coordinates — a hinge's or slide's θ̇ by one jvp of θ, a ball's ω relative to its
parent in the body's frame and a free joint's origin velocity and ω (`_QuaternionRates`) —
it is the same kinetic energy on the constraint manifold, so the motion is the same (for the
joints whose armature is not zero in the file, so a zero `"<joint>.armature"` stays zero). A
hinge's or slide's θ is a function of q, so its ½ a θ̇² is a kinetic completion with its
terms in closed form (`_armature`, `KineticCompletion`); a ball's or free joint's ω is not
the rate of any function of q, and its share goes to the builder as `added_kinetic_energy`
(`_quadratic_form`). A ball's or free
joint's damping −c ⊙ v is the generalized force −∂D/∂q̇ of D = ½ Σ c ⊙ v² (`_damping`).

A ball's spring, and a free joint's, is MuJoCo's (`mj_passive`, `mj_energyPos`): the potential
½ k |θ|² of the rotation vector θ of r⁻¹ ⊗ e (`mju_subQuat`, the shorter rotation, |θ| ≤ π;
`rotation_vector`), e the joint's quaternion read off the bodies (as `to_qpos` reads it), r
its `qpos_spring` (the parameter `"<joint>.springref"`); a free joint's adds ½ k |x − x_ref|²
of its position x (its body's frame origin). It is a force element between the joint's two
bodies (`_QuaternionSpring`) whose force is −∂V/∂q, MuJoCo's −k θ on the joint's `qvel`
(the rotation vector's Jacobian J(θ) has J(θ)ᵀθ = θ); a function of the relative rotation,
unlike a hinge's spring it is exact at every pose (its potential is MuJoCo's, continuous,
with the cut at |θ| = π where MuJoCo's force reverses too).

An actuator on a hinge or slide (`jaxmbs.io.tree.Actuator`) applies its generalized force
Q_θ = g f along its joint's coordinate; in absolute coordinates that is the body
force/torque pair Q = (∂θ/∂q)ᵀ Q_θ (the virtual work Q_θ δθ, one vjp of θ(q)), with f
evaluated at qpos = θ + q_ref and θ̇ (one jvp) as MuJoCo's `actuator_length` and
`actuator_velocity` are (`_actuation`). Its control u(t, q, q̇, p) receives the absolute
coordinates.

Back to MuJoCo's `qpos` (`joint_positions`, `ImportedModel.to_qpos`): each hinge's and
slide's θ + q_ref, each ball's and free joint's quaternion composed from the bodies' Euler
parameters (`joint_quaternions`); a hinge's angle comes in (q_ref − π, q_ref + π] and
`to_qpos` unwraps it along a trajectory. Back to MuJoCo's `qvel` (`joint_velocities`,
`ImportedModel.to_qvel`): each joint's rates as the armature reads them — a hinge's or
slide's θ̇, a ball's ω relative to its parent in its body's frame, a free joint's origin
velocity (world frame) and ω (its body's frame); MuJoCo's `qacc` is their rate.

A body without joints under a moving one moves welded to its parent: `jaxmbs.io.from_mjcf`
has MuJoCo's compiler fuse it into the parent (`fusestatic`: its mass, inertia and geoms
join the parent's; the report's notes name it). Refused with a `ValueError` naming them: a
free joint with other joints on its body (which MuJoCo's compiler refuses first), a body
without joints under a moving one that the compiler keeps because an element refers to it;
`to_qpos` and `to_qvel` of a three-hinge Spherical whose hinges nothing acts on (they have no single
angles).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar, NoReturn

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.compile import quick_jit
from .._internal.linalg import cross
from .._internal.types import Array
from ..kinematics.structure import sample_reference, structure_of_samples
from ..model.joints import forces, spatial
from ..model.joints.orientation import body_rate_matrix, euler_parameters, parameter_rotation
from ..model.mechanism import KineticCompletion, Mechanism
from .tree import (
    BALL,
    FREE,
    HINGE,
    NQ,
    SLIDE,
    Closure,
    Tree,
    TreeJoint,
    joint_motion,
    param_key,
    vee,
)


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


def _refuse(label: str, what: str) -> NoReturn:
    raise ValueError(f"{label}: absolute coordinates do not map {what} (use the joints')")


#: The bodies' frames at q and their rates along q̇, (Frames, Frames): one jvp of
#: `Layout.frames`, from which every joint coordinate's rate is read.
Motion = tuple[spatial.Frames, spatial.Frames]

#: Tolerance on the geometry of a body's several joints (common anchor, axes orthogonal or
#: parallel), relative to the unit axes and to the anchors' distance from the body origin.
_TOLERANCE = 1e-9


@dataclasses.dataclass(frozen=True)
class _Coordinate:
    """A hinge's angle or a slide's offset from its reference, q − q_ref, read off the
    absolute coordinates. Hinge: `sign` times the rotation of body_j relative to body_i about
    axis_i, from reference_j against reference_i (`spatial.relative_angle`). Slide: `sign`
    times the offset axis_i · (P_j − P_i) of point_j from point_i along axis_i (body i's)."""

    joint: TreeJoint
    body_i: int | None
    body_j: int | None
    axis_i: np.ndarray
    reference_i: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    reference_j: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    point_i: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    point_j: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    sign: float = 1.0

    def value(self, at: spatial.Frames, q: Array) -> Array:
        """q − q_ref at the absolute coordinates q, read off the bodies' frames `at` there
        (`Layout.frames(q)`, evaluated once by the caller for all coordinates)."""
        if self.joint.kind == HINGE:
            angle = spatial.relative_angle_at(
                at, self.body_i, self.body_j, self.axis_i, self.reference_i, self.reference_j
            )
            return self.sign * angle
        offset = at.point(self.body_j, self.point_j) - at.point(self.body_i, self.point_i)
        return self.sign * spatial.dot(at.vector(self.body_i, self.axis_i), offset)

    def rate(self, layout: spatial.Layout, motion: Motion, q: Array, qd: Array) -> Array:
        """θ̇ (MuJoCo's `qvel` of the joint), shape (1,): `value` differentiated along the
        frames' rates of `motion` (one jvp of `Layout.frames` along q̇, shared by all)."""
        at, at_dot = motion
        return jnp.atleast_1d(jax.jvp(lambda a: self.value(a, q), (at,), (at_dot,))[1])

    def element(self, spring: bool) -> forces.AbstractForceElement:
        """The joint's spring (stiffness 0 without one) and damper as a force element along
        this coordinate, relaxed where q = springref (MuJoCo's `qpos_spring`)."""
        j, key = self.joint, param_key(self.joint.name, "springref")
        ref, sign = float(j.ref[0]), self.sign
        common = dict(
            stiffness=param_key(j.name, "stiffness") if spring else 0.0,
            damping=param_key(j.name, "damping"),
            body_i=self.body_i,
            body_j=self.body_j,
        )
        if j.kind == HINGE:
            return forces.RotationalSpringDamper(
                j.name, **common, free_angle=lambda p: sign * (p[key] - ref), axis_i=self.axis_i,
                reference_i=self.reference_i, reference_j=self.reference_j,
            )  # fmt: skip
        return forces.AxialSpringDamper(
            j.name, **common, point_i=self.point_i, axis_i=self.axis_i, point_j=self.point_j,
            free_offset=lambda p: sign * (p[key] - ref),
        )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _JointEquality:
    """MuJoCo's joint equality (`jaxmbs.io.tree`) on the joints' coordinates read off the
    absolute ones (`_Coordinate`): θ₁ − Σₖ cₖ θ₂ᵏ = 0 (θ₁ − c₀ = 0 without a second joint),
    θ = q − q_ref; one holonomic row, a callable (t, q, p) of the spatial builder."""

    name: str
    layout: spatial.Layout
    first: _Coordinate
    second: _Coordinate | None
    coefficients: tuple[float, ...]
    rows: ClassVar[int] = 1
    holonomic: ClassVar[bool] = True

    def __call__(self, t: Array, q: Array, p: dict) -> Array:
        at = self.layout.frames(q)
        theta = self.first.value(at, q)
        if self.second is None:
            return jnp.atleast_1d(theta - self.coefficients[0])
        d = self.second.value(at, q)
        return jnp.atleast_1d(theta - sum(c * d**k for k, c in enumerate(self.coefficients)))


@dataclasses.dataclass(frozen=True)
class _SlidingJoint:
    """A body's slides with mutually orthogonal axes, at most one hinge normal to them before
    or after them all (MuJoCo composes them through massless frames): the rows that leave
    the slides' offsets and the hinge's angle free. `turning`'s rotation rows (it is a
    `Fixed` without a hinge, a `Revolute` with one; their common point's rows are dropped),
    and the anchor's offset along each direction no slide moves in (`normals`: the
    orthogonal complement of the slides' axes, in the frame they turn with). One callable
    (t, q, p) of the spatial builder."""

    name: str
    layout: spatial.Layout
    turning: spatial.Fixed | spatial.Revolute
    normals: tuple[_Coordinate, ...]
    holonomic: ClassVar[bool] = True

    @property
    def rows(self) -> int:
        """The turning joint's rotation rows (3 or 2) and one per normal."""
        return self.turning.rows - 3 + len(self.normals)

    def __call__(self, t: Array, q: Array, p: dict) -> Array:
        at = self.layout.frames(q)
        turning = self.turning.residual(at, p)[3:]
        if not self.normals:
            return turning
        offsets = jnp.stack([c.value(at, q) for c in self.normals])
        return jnp.concatenate([turning, offsets])


@dataclasses.dataclass(frozen=True)
class _QuaternionRates:
    """A ball's or free joint's `qvel` (`jaxmbs.io.tree`) read off the absolute coordinates:
    ω = R_jᵀ (ω_j − ω_i), body_j's angular velocity relative to body_i in body_j's frame
    R_j = A_j Fᵀ (F = `axes_j`: its principal axes in that frame, MuJoCo's `iquat`), with the
    world ω = A ω' of the bodies (`Layout.velocities`); a free joint's (body_i the ground)
    preceded by the velocity of body_j's frame origin o (`origin_j`, principal frame),
    ṙ_j + ω_j × A_j o. Linear in q̇."""

    joint: TreeJoint
    body_i: int | None
    body_j: int
    axes_j: np.ndarray
    origin_j: np.ndarray

    def rate(self, layout: spatial.Layout, motion: Motion, q: Array, qd: Array) -> Array:
        """MuJoCo's `qvel` of the joint, shape (3,) (ball) or (6,) (free); the bodies'
        rotations and centre velocities from `motion`."""
        (_, rotations), (velocity, _) = motion
        omega = jnp.sum(rotations * layout.body_angular_velocities(q, qd)[..., None, :], axis=-1)
        A_j = rotations[self.body_j]
        relative = (
            omega[self.body_j] if self.body_i is None else omega[self.body_j] - omega[self.body_i]
        )
        turning = self.axes_j @ (A_j.T @ relative)
        if self.joint.kind == BALL:
            return turning
        origin = velocity[self.body_j] + cross(omega[self.body_j], A_j @ self.origin_j)
        return jnp.concatenate([origin, turning])


@dataclasses.dataclass(frozen=True)
class _JointCoordinate:
    """A hinge's or slide's coordinate on a body in mixed coordinates (`_MixedJoint`): q's
    entry `index` is the joint's `qpos` itself, so θ = q − q_ref and θ̇ are read off it
    directly (the interface of `_Coordinate`, exact at every angle)."""

    joint: TreeJoint
    index: int
    body_i: int | None
    body_j: int

    def value(self, at: spatial.Frames, q: Array) -> Array:
        """q − q_ref."""
        return q[self.index] - self.joint.ref[0]

    def rate(self, layout: spatial.Layout, motion: Motion, q: Array, qd: Array) -> Array:
        """θ̇ (MuJoCo's `qvel` of the joint), shape (1,)."""
        return qd[self.index : self.index + 1]

    def element(self, spring: bool) -> _JointSpringDamper:
        """The joint's spring (none without one) and damper on its coordinate."""
        return _JointSpringDamper(self.joint.name, self, spring)


@dataclasses.dataclass(frozen=True)
class _JointQuaternion:
    """A ball's quaternion on a body in mixed coordinates (`_MixedJoint`): q[index : index +
    4] is the joint's `qpos` e itself, its `qvel` ω = 2 G(e) ė (`jaxmbs.io.tree`)."""

    joint: TreeJoint
    index: int

    def quaternion(self, q: Array) -> Array:
        return q[self.index : self.index + 4]

    def rate(self, layout: spatial.Layout, motion: Motion, q: Array, qd: Array) -> Array:
        """MuJoCo's `qvel` of the ball, shape (3,)."""
        return 2 * body_rate_matrix(self.quaternion(q)) @ qd[self.index : self.index + 4]


@dataclasses.dataclass(frozen=True)
class _JointSpringDamper(forces.AbstractForceElement):
    """MuJoCo's spring and damper of a hinge or slide on a body in mixed coordinates, on its
    coordinate q_k (`_JointCoordinate`, q_k its `qpos`): V = ½ k (q_k − q_spring)² (k = 0
    without a spring), f = k (q_k − q_spring) + c q̇_k along q_k, so Q_k = −f, MuJoCo's
    `qfrc_spring` and `qfrc_damper`. As a force element (`forces.AbstractForceElement`):
    `force` f, `potential` V, the damper's part `nonconservative_force` and its `power`."""

    name: str
    coordinate: _JointCoordinate
    spring: bool
    dimensions: ClassVar[tuple[int, ...]] = (3,)

    @property
    def bodies(self) -> tuple[int | None, ...]:
        return (self.coordinate.body_i, self.coordinate.body_j)

    def _keys(self) -> dict[str, str]:
        fields = ("stiffness", "springref", "damping") if self.spring else ("damping",)
        return {f: param_key(self.coordinate.joint.name, f) for f in fields}

    def check(self, params, dimension: int, n: int) -> None:
        """Refuse a mechanism of another dimension and a missing or non-scalar parameter."""
        if dimension not in self.dimensions:
            raise ValueError(f"force element {self.name!r}: a joint spring acts in space only")
        for field, key in self._keys().items():
            if params is None or key not in params:
                raise ValueError(f"force element {self.name!r}: {field} {key!r} is missing")
            if jnp.shape(params[key]) != ():
                raise ValueError(f"force element {self.name!r}: {field} {key!r} must be a number")

    def _parts(self, q: Array, qd: Array, p: dict) -> tuple[Array, Array]:
        """(k (q_k − q_spring), c q̇_k)."""
        k = self.coordinate.index
        keys = self._keys()
        damper = jnp.asarray(p[keys["damping"]]) * qd[k]
        if not self.spring:
            return jnp.zeros((), q.dtype), damper
        return jnp.asarray(p[keys["stiffness"]]) * (q[k] - p[keys["springref"]]), damper

    def force(self, kit, t, q, qd, p) -> Array:
        return sum(self._parts(q, qd, p))

    def potential(self, kit, q, p) -> Array:
        if not self.spring:
            return jnp.zeros((), q.dtype)
        keys, k = self._keys(), self.coordinate.index
        return 0.5 * p[keys["stiffness"]] * (q[k] - p[keys["springref"]]) ** 2

    def nonconservative_force(self, kit, t, q, qd, p) -> Array:
        return jnp.zeros_like(q).at[self.coordinate.index].set(-self._parts(q, qd, p)[1])

    def generalized_force(self, kit, t, q, qd, p) -> Array:
        """Q_k = −f along q_k, spring and damper together."""
        return jnp.zeros_like(q).at[self.coordinate.index].set(-self.force(kit, t, q, qd, p))

    def power(self, kit, t, q, qd, p) -> Array:
        return -self._parts(q, qd, p)[1] * qd[self.coordinate.index]


@dataclasses.dataclass(frozen=True)
class _MixedJoint:
    """A body's joints in mixed coordinates (module docstring): the joints' own coordinates θ
    (their `qpos`, from q[`indices[k]`] on) compose the parent's frame (x_p, R_p) with the
    body's `offset` (pos, rotation) and the joints in order (`jaxmbs.io.tree.joint_motion`,
    MuJoCo's `mj_kinematics`) into the frame (x, R) the body must have, so its centre of
    mass c = x + R ipos and principal frame A = R A(iquat) (`inertial`): the rows

        c_b − c = 0 (3),   vee(½(E − Eᵀ)) = 0, E = Aᵀ A(e_b) (3),   θ_eᵀθ_e − 1 = 0 (a ball's),

    c_b, e_b the body's own coordinates. The parent is a moving body (`parent`, its
    `parent_inertial` ipos, rotation of iquat: x_p = c_p − R_p ipos_p, R_p = A(e_p) A(iquat_p)ᵀ)
    or static (None, its frame `parent_frame`). One holonomic callable (t, q, p) of the
    spatial builder; `completion` its share of the kinetic energy."""

    name: str
    layout: spatial.Layout
    joints: tuple[TreeJoint, ...]
    indices: tuple[int, ...]
    body: int
    parent: int | None
    parent_frame: tuple[np.ndarray, np.ndarray]
    parent_inertial: tuple[np.ndarray, np.ndarray]
    offset: tuple[np.ndarray, np.ndarray]
    inertial: tuple[np.ndarray, np.ndarray]
    weights: tuple[str, str]
    holonomic: ClassVar[bool] = True

    @property
    def balls(self) -> tuple[int, ...]:
        """The first coordinate of each ball's quaternion."""
        return tuple(i for j, i in zip(self.joints, self.indices, strict=True) if j.kind == BALL)

    @property
    def rows(self) -> int:
        """The body's pose (6) and one normalisation per ball."""
        return 6 + len(self.balls)

    def _pose(self, q: Array, body: int) -> tuple[Array, Array]:
        """A body's centre of mass and principal frame A(e) (its coordinates alone, not
        every body's as `Layout.frames`)."""
        pose = q[self.layout.coordinates(body)]
        return pose[:3], parameter_rotation(pose[3:])

    def frame(self, q: Array) -> tuple[Array, Array]:
        """(x, R) of the body's frame composed from its parent's and the joints at θ."""
        if self.parent is None:
            x, R = (jnp.asarray(a, q.dtype) for a in self.parent_frame)
        else:
            c, A = self._pose(q, self.parent)
            ipos, irot = self.parent_inertial
            R = A @ irot.T
            x = c - R @ ipos
        x, R = x + R @ self.offset[0], R @ self.offset[1]
        for j, i in zip(self.joints, self.indices, strict=True):
            x, R = joint_motion(j, q[i : i + NQ[j.kind]], x, R)
        return x, R

    def __call__(self, t: Array, q: Array, p: dict) -> Array:
        x, R = self.frame(q)
        c, A = self._pose(q, self.body)
        ipos, irot = self.inertial
        rows = [c - (x + R @ ipos), vee((R @ irot).T @ A)]
        rows += [jnp.atleast_1d(q[i : i + 4] @ q[i : i + 4] - 1.0) for i in self.balls]
        return jnp.concatenate(rows)

    def completion(self) -> KineticCompletion:
        """T_c = ½ ṙᵀ W ṙ of the rows' rates ṙ, W the body's mass on the position rows and its
        mean principal moment J̄ on the others: zero wherever the rows' velocity constraints
        hold, so the motion and the multipliers are unchanged, while M gets the share along θ
        that the bodies' kinetic energy does not give it (as J̄ (2 eᵀė)² does for Euler
        parameters, `jaxmbs.model.joints.spatial`); its terms in closed form
        (`KineticCompletion`)."""

        def weights(p: dict) -> Array:
            mass, inertia = (jnp.asarray(p[k]) for k in self.weights)
            mean = jnp.mean(inertia)
            return jnp.concatenate([jnp.full(3, mass), jnp.full(self.rows - 3, mean)])

        return KineticCompletion(lambda q, p: self(0.0, q, p), weights)


def rotation_vector(d: Array) -> Array:
    """MuJoCo's `mju_quat2Vel` of the quaternion d (normalised here): the rotation vector θ
    of the rotation d, the shorter way (|θ| ≤ π): with (w, u) = d/|d|, θ = σ 2 atan2(|u|,
    |w|) u/|u|, σ = −1 where w < 0 (MuJoCo's angle 2 atan2(|u|, w) − 2π there), else 1; near
    θ = 0 the series σ 2u/|w|, so that its derivatives are finite there."""
    d = d / jnp.sqrt(d @ d)
    w, u = d[0], d[1:]
    s2 = u @ u
    small = s2 < 1e-16
    s = jnp.sqrt(jnp.where(small, 1.0, s2))
    angle_over_s = jnp.where(small, 1.0 / jnp.abs(w), jnp.arctan2(s, jnp.abs(w)) / s)
    return jnp.where(w < 0, -2.0, 2.0) * angle_over_s * u


@dataclasses.dataclass(frozen=True)
class _QuaternionSpring(forces.AbstractForceElement):
    """MuJoCo's spring of a ball joint, or of a free joint, as a force element between its
    body's parent (`body_i`, None: the ground) and its body (`body_j`). Its deformation δ is
    the rotation vector θ of r⁻¹ ⊗ e (`rotation_vector`; MuJoCo's `mju_subQuat(e, r)`): e
    the joint's quaternion read off the absolute coordinates (`quaternion`, as `to_qpos`
    reads it), r its springref (MuJoCo's `qpos_spring`); a free joint's δ is preceded by its
    position x (`origin`: its body's frame origin) less the springref's x_ref. The potential
    is MuJoCo's (`mj_energyPos`), V = ½ k |δ|²; its force −∂V/∂q is MuJoCo's −k θ on the
    joint's `qvel` (−k (x − x_ref) on the free joint's translation) as the bodies' force and
    torque: with ω the joint's angular velocity in its body's frame, θ̇ = J⁻¹(θ) ω and
    J⁻ᵀ(θ) θ = θ, so V's derivative along ω is k θᵀω. No damping: a ball's and a free
    joint's dampers act on their `qvel` (`_damping`). As a force element
    (`forces.AbstractForceElement`): `force` is f = k δ (δ's shape), `potential` V, no
    non-conservative part."""

    name: str
    joint: TreeJoint
    body_i: int | None
    body_j: int
    quaternion: Callable[[Array], Array]
    origin: Callable[[Array], Array] | None = None
    dimensions: ClassVar[tuple[int, ...]] = (3,)

    @property
    def bodies(self) -> tuple[int | None, ...]:
        return (self.body_i, self.body_j)

    def _keys(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        size = 7 if self.joint.kind == FREE else 4
        return {
            "stiffness": (param_key(self.joint.name, "stiffness"), ()),
            "springref": (param_key(self.joint.name, "springref"), (size,)),
        }

    def check(self, params, dimension: int, n: int) -> None:
        """Refuse a mechanism of another dimension, a missing stiffness or springref, or one
        of another shape (a number; a quaternion, preceded by a position for a free joint)."""
        if dimension not in self.dimensions:
            raise ValueError(f"force element {self.name!r}: a joint spring acts in space only")
        for field, (key, shape) in self._keys().items():
            if params is None or key not in params:
                raise ValueError(f"force element {self.name!r}: {field} {key!r} is missing")
            if tuple(jnp.shape(params[key])) != shape:
                raise ValueError(
                    f"force element {self.name!r}: {field} {key!r} must have shape {shape}, "
                    f"got {tuple(jnp.shape(params[key]))}"
                )

    def deformation(self, q: Array, p: dict) -> Array:
        """δ = θ (ball), (x − x_ref, θ) (free), shape (3,) or (6,)."""
        ref = jnp.asarray(p[self._keys()["springref"][0]])
        if self.origin is None:
            return rotation_vector(_quaternion_product(_conjugate(ref), self.quaternion(q)))
        turn = rotation_vector(_quaternion_product(_conjugate(ref[3:]), self.quaternion(q)))
        return jnp.concatenate([self.origin(q) - ref[:3], turn])

    def _stiffness(self, p: dict) -> Array:
        return jnp.asarray(p[self._keys()["stiffness"][0]])

    def force(self, kit, t, q, qd, p) -> Array:
        """f = k δ: the joint's torque k θ in its body's frame (MuJoCo's −`qfrc_spring`), a
        free joint's preceded by its force k (x − x_ref), world components."""
        return self._stiffness(p) * self.deformation(q, p)

    def potential(self, kit, q, p) -> Array:
        """V = ½ k |δ|² (MuJoCo's `mj_energyPos`)."""
        delta = self.deformation(q, p)
        return 0.5 * self._stiffness(p) * (delta @ delta)

    def nonconservative_force(self, kit, t, q, qd, p) -> Array:
        return jnp.zeros_like(q)

    def power(self, kit, t, q, qd, p) -> Array:
        return jnp.zeros((), q.dtype)


def _body_joints(
    js: list[TreeJoint],
    parent: int,
    at: _BodyFrames,
    layout: spatial.Layout,
    label: str,
    body_name: str,
    acted_on: frozenset[str] = frozenset(),
) -> tuple[list, list[_Coordinate]] | None:
    """A body's joints (MuJoCo composes them in order through massless frames) as spatial
    joints between its parent and it, and the coordinates of its hinges and slides:

    - one joint: a hinge a `Revolute`, a slide a `Translational`, a ball a `Spherical`, a
      free joint nothing;
    - two hinges with a common anchor and orthogonal axes: a `Universal` (the first axis is
      fixed in the parent, the second in the body; the second angle is the parent's turn
      about it, negated);
    - a hinge and a slide along one axis, either order: a `Cylindrical`;
    - three hinges with a common anchor and independent axes: a `Spherical` (their angles
      are a chart of the relative rotation, not single relative angles: no coordinates),
      unless a force or an equality acts on one of them (`acted_on`);
    - slides with mutually orthogonal axes and at most one hinge normal to them, before or
      after them all (three slides, a planar slide–slide–hinge, a hinge and a slide across
      it): a `_SlidingJoint`; after a hinge the slides turn with the body, so their offsets
      are read along the body's axes (negated: the parent's point from the body's).

    Anything else (a free joint alone aside): `None`, for mixed coordinates (`_mixed_joint`)."""
    b, first = js[0].body, js[0]
    # the hinges' common anchor (a Cylindrical's axis runs through the hinge's)
    anchor = at.joint_point(b, next((j for j in js if j.kind == HINGE), first).pos)
    (body_i, point_i), (body_j, point_j) = at.point(parent, anchor), at.point(b, anchor)
    axes = [at.frame_R[b] @ j.axis for j in js]  # world axes at qpos0
    kinds = tuple(j.kind for j in js)
    size = max(1.0, *(float(np.linalg.norm(j.pos)) for j in js))
    common = all(np.linalg.norm(j.pos - first.pos) <= _TOLERANCE * size for j in js)

    def on(body: int, world: np.ndarray) -> np.ndarray:
        return at.vector(body, world)

    def angle(j: TreeJoint, axis: np.ndarray, normal: np.ndarray) -> _Coordinate:
        return _Coordinate(j, body_i, body_j, on(parent, axis), on(parent, normal), on(b, normal))

    def offset(j: TreeJoint, axis: np.ndarray) -> _Coordinate:
        return _Coordinate(j, body_i, body_j, on(parent, axis), point_i=point_i, point_j=point_j)

    if kinds == (FREE,):
        return [], []
    if FREE in kinds:  # MuJoCo's compiler refuses it first: more than 6 dofs in one body
        _refuse(label, f"body {body_name!r}'s free joint with other joints")
    if kinds == (BALL,):
        return [spatial.Spherical(first.name, body_i, point_i, body_j, point_j)], []
    if kinds in ((HINGE,), (SLIDE,)):
        axis, normal = axes[0], _perpendicular(axes[0])
        if kinds == (SLIDE,):
            slide = spatial.Translational(
                first.name, body_i, point_i, on(parent, axis), on(parent, normal), body_j,
                point_j, on(b, axis), on(b, normal),
            )  # fmt: skip
            return [slide], [offset(first, axis)]
        hinge = spatial.Revolute(
            first.name, body_i, point_i, on(parent, axis), body_j, point_j, on(b, axis)
        )
        return [hinge], [angle(first, axis, normal)]
    name = "+".join(j.name for j in js)
    if kinds == (HINGE, HINGE) and common and abs(axes[0] @ axes[1]) <= _TOLERANCE:
        a1, a2 = axes
        cross = spatial.Universal(name, body_i, point_i, on(parent, a1), body_j, point_j, on(b, a2))
        second = _Coordinate(js[1], body_j, body_i, on(b, a2), on(b, a1), on(parent, a1), sign=-1.0)
        return [cross], [angle(js[0], a1, a2), second]
    if sorted(kinds) == [HINGE, SLIDE] and np.linalg.norm(np.cross(*axes)) <= _TOLERANCE:
        h, s = js if kinds[0] == HINGE else js[::-1]
        axis = at.frame_R[b] @ h.axis
        cylinder = spatial.Cylindrical(
            name, body_i, point_i, on(parent, axis), body_j, point_j, on(b, axis)
        )
        return [cylinder], [angle(h, axis, _perpendicular(axis)), offset(s, axis)]
    if (
        kinds == (HINGE, HINGE, HINGE)
        and common
        and abs(np.linalg.det(np.stack(axes))) > _TOLERANCE
        and not acted_on.intersection(j.name for j in js)
    ):
        return [spatial.Spherical(name, body_i, point_i, body_j, point_j)], []
    slides = [(j, a) for j, a in zip(js, axes, strict=True) if j.kind == SLIDE]
    hinges = [(j, a) for j, a in zip(js, axes, strict=True) if j.kind == HINGE]
    slide_axes = np.stack([a for _, a in slides]) if slides else np.zeros((0, 3))
    if (
        slides
        and len(slides) + len(hinges) == len(js)
        and len(hinges) <= 1
        and kinds[1:-1].count(HINGE) == 0
        and np.all(np.abs(slide_axes @ slide_axes.T - np.eye(len(slides))) <= _TOLERANCE)
        and all(np.all(np.abs(slide_axes @ a) <= _TOLERANCE) for _, a in hinges)
    ):
        turned = kinds[0] == HINGE  # the slides come after the hinge: they turn with the body

        def along(j: TreeJoint, axis: np.ndarray) -> _Coordinate:
            if not turned:
                return offset(j, axis)
            return _Coordinate(j, body_j, body_i, on(b, axis), point_i=point_j, point_j=point_i,
                               sign=-1.0)  # fmt: skip

        coordinates = [along(j, a) for j, a in slides]
        normals = np.linalg.svd(slide_axes)[2][len(slides) :]  # the slides' complement
        if hinges:
            h, axis = hinges[0]
            turning = spatial.Revolute(
                name, body_i, point_i, on(parent, axis), body_j, point_j, on(b, axis)
            )
            coordinates.append(angle(h, axis, _perpendicular(axis)))
        else:
            frame_i, frame_j = on(parent, np.eye(3)), on(b, np.eye(3))  # equal at qpos0
            turning = spatial.Fixed(name, body_i, point_i, body_j, point_j, frame_i, frame_j)
        rows = tuple(along(slides[0][0], n) for n in normals)
        return [_SlidingJoint(name, layout, turning, rows)], coordinates
    return None  # any other combination: mixed coordinates (`_mixed_joint`)


def _mixed_joint(
    js: list[TreeJoint], parent: int, at: _BodyFrames, layout: spatial.Layout, start: int, tree
) -> tuple[_MixedJoint, list, list[str]]:
    """A body's joints in mixed coordinates (`_MixedJoint`), their coordinates from q[start]
    on: the joint, the readers of its joints' coordinates (`_JointCoordinate` for a hinge or
    slide, `_JointQuaternion` for a ball) and the coordinates' names (a hinge's or slide's
    name, a ball's with `.qw .qx .qy .qz`, as `Tree.coordinate_names`)."""
    b = js[0].body
    indices = tuple(start + int(k) for k in np.cumsum([0] + [NQ[j.kind] for j in js[:-1]]))
    body_i, body_j = at.index.get(parent), at.index[b]
    readers: list = []
    names: list[str] = []
    for j, i in zip(js, indices, strict=True):
        if j.kind == BALL:
            readers.append(_JointQuaternion(j, i))
            names += [f"{j.name}.q{c}" for c in "wxyz"]
        else:
            readers.append(_JointCoordinate(j, i, body_i, body_j))
            names.append(j.name)
    name = tree.body_names[b]
    joint = _MixedJoint(
        "+".join(j.name for j in js), layout, tuple(js), indices, body_j, body_i,
        (at.frame_x[parent], at.frame_R[parent]),
        (tree.body_ipos[parent], tree.body_irot[parent]),
        (tree.body_pos[b], tree.body_rot[b]),
        (tree.body_ipos[b], tree.body_irot[b]),
        (param_key(name, "mass"), param_key(name, "inertia")),
    )  # fmt: skip
    return joint, readers, names


def absolute_mechanism(
    tree: Tree, params: dict, q_ref: Array, label: str, control: Callable
) -> tuple[Mechanism, tuple[int, ...], tuple[Callable, Callable] | None, np.ndarray]:
    """The mechanism in absolute coordinates, per body of it the MuJoCo body index, the
    maps q ↦ `qpos` and (q, q̇) ↦ `qvel` (`joint_positions`, `joint_velocities`; `None`
    where a three-hinge Spherical's hinges have no single angles), and the `qpos` addresses
    of the joint coordinates that follow the bodies' (mixed coordinates, `_MixedJoint`);
    `control(t, q, qd, p)`, of the absolute coordinates, gives the actuators' inputs u."""
    moving = sorted({j.body for j in tree.joints})
    for b in range(1, len(tree.body_names)):
        if b not in moving and _moving_ancestor(tree, b, moving):
            raise ValueError(
                f"{label}: absolute coordinates need a joint on every moving body; body "
                f"{tree.body_names[b]!r} has none, and MuJoCo's compiler does not fuse it into "
                "its parent because an element refers to it (an equality, a sensor's site): "
                "use the joint coordinates"
            )
    ref = tree.kinematics_at(q_ref)
    at = _BodyFrames({b: k for k, b in enumerate(moving)}, ref.com, ref.irot, ref.x, ref.R)
    bodies = [
        spatial.Body(
            tree.body_names[b],
            param_key(tree.body_names[b], "mass"),
            param_key(tree.body_names[b], "inertia"),
        )
        for b in moving
    ]
    by_body: dict[int, list[TreeJoint]] = {}
    for j in tree.joints:
        by_body.setdefault(j.body, []).append(j)
    layout = spatial.Layout.from_bodies(bodies)
    acted_on = _acted_on(tree, params)
    joints: list = []
    coordinates: dict[str, _Coordinate | _JointCoordinate] = {}
    mixed: list[_MixedJoint] = []
    quaternions: dict[str, _JointQuaternion] = {}
    names: list[str] = []
    for b, js in by_body.items():
        body_joints = _body_joints(
            js, tree.parent[b], at, layout, label, tree.body_names[b], acted_on
        )
        if body_joints is None:
            joint, readers, more = _mixed_joint(
                js, tree.parent[b], at, layout, layout.n + len(names), tree
            )
            mixed.append(joint)
            joints.append(joint)
            names += more
            for r in readers:
                (quaternions if isinstance(r, _JointQuaternion) else coordinates)[r.joint.name] = r
            continue
        mapped, coords = body_joints
        joints += mapped
        coordinates.update((c.joint.name, c) for c in coords)
    extra = np.array(
        [j.qadr + k for m in mixed for j in m.joints for k in range(NQ[j.kind])], dtype=int
    )
    rates: dict[str, _Coordinate | _JointCoordinate | _QuaternionRates | _JointQuaternion] = {
        **coordinates,
        **quaternions,
    }
    for j in tree.joints:
        if j.kind in (BALL, FREE) and j.name not in quaternions:
            parent, origin = at.index.get(tree.parent[j.body]), at.point(j.body, at.frame_x[j.body])
            rates[j.name] = _QuaternionRates(
                j, parent, at.index[j.body], tree.body_irot[j.body], origin[1]
            )
    elements: list = []
    quaternion = joint_quaternions(tree, moving, q_ref, layout, quaternions)
    for j, spring in zip(tree.joints, tree.springs, strict=True):
        if j.name in coordinates:
            elements.append(coordinates[j.name].element(spring))
        elif spring and j.kind in (BALL, FREE):
            elements.append(_quaternion_spring(j, at, layout, tree.parent[j.body], quaternion))

    def terms(field: str, kinds: tuple[str, ...]) -> list:
        """(parameter key, rates) of the joints of `kinds` whose `field` is not zero."""
        return [
            (param_key(j.name, field), rates[j.name])
            for j in tree.joints
            if j.name in rates
            and j.kind in kinds
            and np.any(np.asarray(params[param_key(j.name, field)]) != 0)
        ]

    rotors = terms("armature", (BALL, FREE))
    coordinate_rotors = terms("armature", (HINGE, SLIDE))
    dampers = terms("damping", (BALL, FREE))  # the hinges' and slides': their elements
    for c in tree.closures:
        if c.kind == "joint":
            joints.append(_joint_equality(tree, c, coordinates, layout))
            continue
        (b1, p1), (b2, p2) = (
            at.point(b, at.joint_point(b, p)) for b, p in ((c.body1, c.point1), (c.body2, c.point2))
        )
        if c.kind == "connect":
            joints.append(spatial.Spherical(c.name, b1, p1, b2, p2))
            continue
        # E = (R₂F₂)ᵀ R₁F₁ R_rel with R = A·irotᵀ: the principal frames' Fixed frames
        f1 = at.vector(c.body1, at.frame_R[c.body1] @ c.frame1 @ c.relative)
        f2 = at.vector(c.body2, at.frame_R[c.body2] @ c.frame2)
        joints.append(spatial.Fixed(c.name, b1, p1, b2, p2, f1, f2))
    reference = jnp.asarray(absolute_state(tree, moving, q_ref, extra=extra))
    loads = [_damping(layout, dampers)] if dampers else []
    if tree.actuators:
        loads.append(_actuation(tree, layout, coordinates, control))
    mech = spatial.spatial_mechanism(
        bodies, joints, params, gravity="gravity", elements=elements,
        applied_forces=_summed(loads) if loads else None,
        added_kinetic_energy=_quadratic_form(layout, rotors) if rotors else None,
        completions=[m.completion() for m in mixed]
        + ([_armature(layout, coordinate_rotors)] if coordinate_rotors else []),
        extra_coordinates=names,
    )  # fmt: skip
    # M at qpos0 comes from the program that samples C and M for the structure (sample 0)
    samples = sample_reference(mech, reference)
    M = samples.mass
    if not np.all(np.linalg.eigvalsh((M + M.T) / 2) > 0):
        raise ValueError(f"{label}: the mass matrix at qpos0 is not positive definite")
    maps = None
    if all(j.name in rates for j in tree.joints):
        maps = (
            joint_positions(tree, moving, q_ref, layout, coordinates, quaternions),
            joint_velocities(tree, layout, rates),
        )
    return mech.replace_structure(structure_of_samples(mech, samples)), tuple(moving), maps, extra


def _acted_on(tree: Tree, params: dict) -> frozenset[str]:
    """The joints something acts on along their coordinates: armature, damping or a spring
    (a non-zero parameter), an actuator or a joint equality: none of them is one of a
    three-hinge Spherical's hinges (`_body_joints`), so each has its rates and coordinate."""
    acted = {tree.joints[a.joint].name for a in tree.actuators}
    acted.update(
        tree.joints[k].name
        for c in tree.closures
        if c.kind == "joint"
        for k in (c.joint1, c.joint2)
        if k >= 0
    )
    for j, spring in zip(tree.joints, tree.springs, strict=True):
        terms = [params[param_key(j.name, f)] for f in ("armature", "damping")]
        if spring:
            terms.append(params[param_key(j.name, "stiffness")])
        if any(np.any(np.asarray(x) != 0) for x in terms):
            acted.add(j.name)
    return frozenset(acted)


def _quaternion_spring(
    j: TreeJoint,
    at: _BodyFrames,
    layout: spatial.Layout,
    parent: int,
    quaternion: Callable[[Array, TreeJoint], Array],
) -> _QuaternionSpring:
    """A ball's or free joint's spring (`_QuaternionSpring`): its quaternion read off the
    absolute coordinates, a free joint's position too (its body's frame origin)."""
    body = at.index[j.body]
    origin = None
    if j.kind == FREE:
        local = at.point(j.body, at.frame_x[j.body])[1]  # the frame origin, principal frame

        def origin(q: Array) -> Array:
            return layout.frames(q).point(body, local)

    return _QuaternionSpring(
        j.name, j, at.index.get(parent), body, lambda q: quaternion(q, j), origin
    )


def _quaternion_product(a: Array, b: Array) -> Array:
    """Hamilton's product a ⊗ b (w first): A(a ⊗ b) = A(a) A(b)."""
    w = a[0] * b[0] - a[1:] @ b[1:]
    return jnp.concatenate([w[None], a[0] * b[1:] + b[0] * a[1:] + cross(a[1:], b[1:])])


def _conjugate(e: Array) -> Array:
    """e* = (e₀, −e₁, −e₂, −e₃), the inverse rotation's quaternion."""
    return e * np.array([1.0, -1.0, -1.0, -1.0])


def joint_quaternions(
    tree: Tree,
    moving: Sequence[int],
    q_ref: Array,
    layout: spatial.Layout,
    direct: dict[str, _JointQuaternion] | None = None,
) -> Callable[[Array, TreeJoint], Array]:
    """The map (q, j) ↦ the quaternion of ball or free joint j (MuJoCo's `qpos` part) from
    absolute coordinates: a body's frame R = A·A(iquat)ᵀ has the quaternion c = e ⊗ iquat*
    (e its Euler parameters; a static body's is its frame's at q_ref), so a free joint's is c
    and a ball's (c_p ⊗ quat)* ⊗ c, c_p its parent's (MuJoCo's `mj_kinematics`: R =
    R_p·A(quat)·A(e_ball)); as long as e is, not normalised. A ball in mixed coordinates
    (`direct`) has its quaternion among q."""
    direct = direct or {}
    index = {b: k for k, b in enumerate(moving)}
    R_ref = tree.kinematics_at(q_ref).R
    inertial = [_conjugate(euler_parameters(tree.body_irot[b])) for b in range(len(R_ref))]

    def frame_quaternion(q: Array, b: int) -> Array:
        if b not in index:  # the ground or a body fixed to it
            return jnp.asarray(euler_parameters(R_ref[b]))
        e = layout.euler_parameters(q)[index[b]]
        return _quaternion_product(e, jnp.asarray(inertial[b]))

    def quaternion(q: Array, j: TreeJoint) -> Array:
        if j.name in direct:
            return direct[j.name].quaternion(q)
        c = frame_quaternion(q, j.body)
        if j.kind == FREE:
            return c
        before = _quaternion_product(
            frame_quaternion(q, tree.parent[j.body]),
            jnp.asarray(euler_parameters(tree.body_rot[j.body])),
        )
        return _quaternion_product(_conjugate(before), c)

    return quaternion


def joint_positions(
    tree: Tree,
    moving: Sequence[int],
    q_ref: Array,
    layout: spatial.Layout,
    coordinates: dict[str, _Coordinate | _JointCoordinate],
    direct: dict[str, _JointQuaternion] | None = None,
) -> Callable[[Array], Array]:
    """The map q ↦ MuJoCo's `qpos` from absolute coordinates (one state): a hinge's or
    slide's θ + q_ref (`_Coordinate`, a hinge's angle in (q_ref − π, q_ref + π]; in mixed
    coordinates its coordinate itself), a ball's quaternion and a free joint's
    (`joint_quaternions`), preceded by its position, the body frame's x (`body_frames`).
    Every hinge and slide must have a coordinate."""
    frames = body_frames(tree, moving, q_ref)
    quaternion = joint_quaternions(tree, moving, q_ref, layout, direct)

    def positions(q: Array) -> Array:
        qpos = jnp.zeros(tree.nq, q.dtype)
        at = layout.frames(q)
        for j in tree.joints:
            if j.kind in (HINGE, SLIDE):
                value = coordinates[j.name].value(at, q) + j.ref[0]
                qpos = qpos.at[j.qadr].set(value)
                continue
            a = j.qadr
            if j.kind == FREE:
                qpos = qpos.at[a : a + 3].set(frames(q)[0][j.body])
                a += 3
            qpos = qpos.at[a : a + 4].set(quaternion(q, j))
        return qpos

    return quick_jit(positions)  # one compiled call, not op by op under `jnp.vectorize`


def joint_velocities(
    tree: Tree, layout: spatial.Layout, rates: dict[str, _Coordinate | _QuaternionRates]
) -> Callable[[Array, Array], Array]:
    """The map (q, q̇) ↦ MuJoCo's `qvel` from absolute coordinates (one state), each joint's
    rates in joint order (MuJoCo's dof order): a hinge's θ̇ and a slide's (`_Coordinate.rate`),
    a ball's ω relative to its parent in its body's frame, a free joint's origin velocity
    (world) and ω in its body's frame (`_QuaternionRates`). Linear in q̇. Every joint must
    have rates."""

    def velocities(q: Array, qd: Array) -> Array:
        motion = jax.jvp(layout.frames, (q,), (qd,))
        parts = [jnp.atleast_1d(rates[j.name].rate(layout, motion, q, qd)) for j in tree.joints]
        return jnp.concatenate(parts) if parts else jnp.zeros(0, q.dtype)

    return quick_jit(velocities)


def _actuation(
    tree: Tree,
    layout: spatial.Layout,
    coordinates: dict[str, _Coordinate | _JointCoordinate],
    control: Callable,
) -> Callable[[Array, Array, Array, dict], Array]:
    """The actuators' generalized force Q(t, q, q̇, p) = (∂θ/∂q)ᵀ Q_θ (module docstring):
    θ(q) places each actuated joint's coordinate, read off the absolute ones, at its `qpos`
    address (θ + q_ref, the rest zero), Q_θ = `Tree.actuator_forces` there (one vjp of θ
    pulls it back, one jvp gives θ̇); in mixed coordinates θ is a coordinate itself, and the
    pullback puts Q_θ on it."""
    joints = list(
        {tree.joints[a.joint].name: tree.joints[a.joint] for a in tree.actuators}.values()
    )
    address = np.array([j.qadr for j in joints])
    ref = np.array([float(j.ref[0]) for j in joints])

    def positions(q: Array) -> Array:
        at = layout.frames(q)
        theta = jnp.stack([coordinates[j.name].value(at, q) for j in joints])
        return jnp.zeros(tree.nq, q.dtype).at[address].set(theta + ref)

    def applied_forces(t: Array, q: Array, qd: Array, p: dict) -> Array:
        qpos, pullback = jax.vjp(positions, q)
        qpos_rate = jax.jvp(positions, (q,), (qd,))[1]
        return pullback(tree.actuator_forces(control(t, q, qd, p), qpos, qpos_rate, p))[0]

    return applied_forces


def _armature(
    layout: spatial.Layout, terms: list[tuple[str, _Coordinate | _JointCoordinate]]
) -> KineticCompletion:
    """The hinges' and slides' armature, T_a = ½ Σₖ aₖ θ̇ₖ² (module docstring), as a kinetic
    completion of the rows θ(q), their coordinates read off the bodies' frames (θ is a
    function of q: its rate θ̇ = (∂θ/∂q) q̇ is MuJoCo's `qvel`), so that its terms come in
    closed form (`KineticCompletion`: M_a = Rᵀ diag(a) R, Q_a = −Rᵀ diag(a) (Ṙ q̇), R = ∂θ/∂q)
    with two nested derivatives of θ rather than three."""

    def rows(q: Array, p: dict) -> Array:
        at = layout.frames(q)
        return jnp.stack([jnp.ravel(c.value(at, q))[0] for _, c in terms])

    def weights(p: dict) -> Array:
        return jnp.stack([jnp.ravel(jnp.asarray(p[key]))[0] for key, _ in terms])

    return KineticCompletion(rows, weights)


def _quadratic_form(
    layout: spatial.Layout, terms: list[tuple[str, _QuaternionRates | _JointQuaternion]]
) -> Callable[[Array, Array, dict], Array]:
    """½ Σₖ wₖ ⊙ vₖ² over `terms`, each a parameter key (the weights w, one per degree of
    freedom) and a joint's rates v (MuJoCo's `qvel` of the joint, read off the absolute
    coordinates): with the balls' and free joints' armatures, their share of the kinetic
    energy T_a of the module docstring (the hinges' and slides': `_armature`); with the
    dampers, Rayleigh's dissipation function (`_damping`)."""

    def form(q: Array, qd: Array, p: dict) -> Array:
        motion = jax.jvp(layout.frames, (q,), (qd,))  # the bodies' frames once, for all terms
        return 0.5 * sum(
            jnp.sum(jnp.asarray(p[key]) * rates.rate(layout, motion, q, qd) ** 2)
            for key, rates in terms
        )

    return form


def _damping(
    layout: spatial.Layout, dampers: list[tuple[str, _QuaternionRates]]
) -> Callable[[Array, Array, Array, dict], Array]:
    """MuJoCo's damping −c ⊙ v on a ball's or free joint's `qvel` v as the generalized force
    Q = −(∂v/∂q̇)ᵀ (c ⊙ v) = −∂D/∂q̇, D = ½ Σ c ⊙ v² (`_quadratic_form`; v is linear in q̇)."""
    dissipation = jax.grad(_quadratic_form(layout, dampers), argnums=1)

    def applied_forces(t: Array, q: Array, qd: Array, p: dict) -> Array:
        return -dissipation(q, qd, p)

    return applied_forces


def _summed(loads: list[Callable]) -> Callable[[Array, Array, Array, dict], Array]:
    """The sum of generalized forces (t, q, q̇, p) -> Q."""

    def applied_forces(t: Array, q: Array, qd: Array, p: dict) -> Array:
        return sum(load(t, q, qd, p) for load in loads)

    return applied_forces


def _joint_equality(
    tree: Tree,
    c: Closure,
    coordinates: dict[str, _Coordinate | _JointCoordinate],
    layout: spatial.Layout,
) -> _JointEquality:
    """A joint equality on the coordinates of its joints (each has one: `_acted_on`)."""
    joints = [tree.joints[k] for k in (c.joint1, c.joint2) if k >= 0]
    first, *second = (coordinates[j.name] for j in joints)
    coefficients = tuple(float(x) for x in c.coefficients)
    return _JointEquality(c.name, layout, first, second[0] if second else None, coefficients)


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
    other bodies are static: where they are at the joint coordinates q_ref. Mixed
    coordinates' joint coordinates, after the bodies', are not read."""
    ref = tree.kinematics_at(q_ref)
    x_ref, R_ref = jnp.asarray(ref.x), jnp.asarray(ref.R)
    index = np.asarray(moving, dtype=int)
    irot_t, ipos = np.swapaxes(tree.body_irot[index], 1, 2), tree.body_ipos[index]

    def frames(q: Array) -> tuple[Array, Array]:
        poses = q[: 7 * index.size].reshape(-1, 7)  # the joint coordinates after: no body's
        R = parameter_rotation(poses[:, 3:]) @ irot_t
        x = poses[:, :3] - jnp.einsum("bij,bj->bi", R, ipos)
        return x_ref.at[index].set(x), R_ref.at[index].set(R)

    return frames


def absolute_state(tree: Tree, moving, q: Array, qd: Array | None = None, *, extra=()):
    """The absolute coordinates (centre of mass, Euler parameters of the principal frame)
    of every moving body at joint coordinates q, and with q̇ their rates: ṙ, and
    ė = ½ G(e)ᵀ ω' with ω' the principal-frame angular velocity; then the joint
    coordinates of mixed coordinates, q and q̇ at their `qpos` addresses `extra`."""
    extra = np.asarray(extra, dtype=int)
    at = tree.kinematics_at(q, qd)
    e = [euler_parameters(at.irot[b]) for b in moving]
    pose = np.concatenate(
        [np.concatenate([at.com[b], eb]) for b, eb in zip(moving, e, strict=True)]
        + [np.asarray(q)[extra]]
    )
    if qd is None:
        return pose
    v, omega = at.v, at.omega
    rates = []
    for b, eb in zip(moving, e, strict=True):
        G = np.asarray(body_rate_matrix(eb))
        rates.append(np.concatenate([v[b - 1], 0.5 * G.T @ omega[b - 1]]))
    return pose, np.concatenate([*rates, np.asarray(qd)[extra]])
