"""A kinematic tree in joint coordinates, with loop-closing constraints: MuJoCo's model
semantics as pure JAX functions (no `mujoco` import here; `jaxmbs.io.mjcf` fills it in).

**Coordinates.** q is MuJoCo's `qpos`, in its order: one angle (hinge) or length (slide)
per joint, and a unit quaternion e = (e₀, e₁, e₂, e₃) (w first, Hamilton's convention) per
`ball` joint, preceded by the position (x, y, z) for a `free` joint. q̇ = dq/dt, so a
quaternion's four rates ė replace MuJoCo's three angular velocities ω (in the child's frame):

    ω = 2 G(e) ė,    ė = ½ G(e)ᵀ ω    (Nikravesh 1988, eq 6.98; G from `body_rate_matrix`),

and each quaternion carries the holonomic row eᵀe − 1 = 0 (group `"normalization"`), as the
library's Euler-parameter bodies do.

**Forward kinematics** (MuJoCo's `mj_kinematics`, body by body from the root): a body's frame
starts at its parent's frame composed with the body's `pos`/`quat`, then each of its joints
acts in order about its anchor s (`jnt_pos`, body frame) and axis a (`jnt_axis`):

- hinge: R ← R·Rot(a, q − q_ref), x ← (x + R_old s) − R s;
- slide: x ← x + R a (q − q_ref);
- ball:  R ← R·A(e), x ← (x + R_old s) − R s;
- free:  x ← (q₀, q₁, q₂), R ← A(e) (the body's own pos/quat are replaced).

q_ref is MuJoCo's `qpos0`. The centre of mass is at x + R·`ipos`, the principal axes of
inertia are R·A(`iquat`), with the principal moments `inertia`.

**Dynamics** in Lagrangian form (`Mechanism.from_lagrangian`):

    T = Σ_b ½ m_b |ẋ_b|² + ½ ω_bᵀ diag(I_b) ω_b + Σ_dof ½ armature v² + Σ_quat ½ J̄ (2 eᵀė)²,
    V = −Σ_b m_b gᵀ x_b + Σ_joint ½ k (q − q_spring)²,
    Qᵉ = −(∂v/∂q̇)ᵀ (damping ⊙ v),

with x_b the centre of mass, ω_b the angular velocity in the principal frame (the vee of
R_bᵀ Ṙ_b, Ṙ_b by a jvp), v MuJoCo's `qvel` (armature adds to the joint-space inertia exactly
as MuJoCo's `dof_armature` does), and J̄ > 0 completing the mass matrix along e as in
`jaxmbs.model.joints.spatial` (it vanishes where eᵀė = 0, so the motion is unchanged). The
spring of a ball joint (and of a free joint's rotation) is MuJoCo's: ½ k |θ|² with θ the
rotation vector of q_springᵀ⁻¹ e (`mju_subQuat`), whose force −kθ in ω-space is its gradient.

**Loop closures** are holonomic rows (the soft `solref`/`solimp` are not used):
`connect` p₁ − p₂ = 0 (the anchor points), `weld` the same plus ½ vee(E − Eᵀ) = 0 with
E = R₂ᵀ R₁ R_rel the relative rotation error (MuJoCo's relative pose), `joint`
q₁ − q₁_ref − Σ cₖ (q₂ − q₂_ref)ᵏ = 0.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.compile import quick_jit
from .._internal.linalg import cross
from .._internal.types import Array
from ..model.joints.orientation import body_rate_matrix, parameter_rotation

FREE, BALL, SLIDE, HINGE = "free", "ball", "slide", "hinge"
#: coordinates (nq) and velocities (nv) of each joint kind
NQ = {FREE: 7, BALL: 4, SLIDE: 1, HINGE: 1}
NV = {FREE: 6, BALL: 3, SLIDE: 1, HINGE: 1}
#: the constraint group of the quaternions' normalisations (the library's name)
NORMALIZATION = "normalization"


@dataclasses.dataclass(frozen=True, eq=False)
class TreeJoint:
    """One joint: its kind, the body it moves, where its coordinates lie in q (`qpos`) and
    its velocities in v (`qvel`), its anchor and axis in the body frame, its reference."""

    name: str
    kind: str
    body: int
    qadr: int
    vadr: int
    pos: np.ndarray
    axis: np.ndarray
    ref: np.ndarray  # qpos0 of this joint's coordinates


@dataclasses.dataclass(frozen=True, eq=False)
class Closure:
    """A loop-closing equality as hard holonomic rows.

    `kind` is `"connect"`, `"weld"` or `"joint"`. For connect and weld, body1/body2 are body
    indices (0 = world) and point1/point2 the anchor points in those bodies' frames; `frame1`,
    `frame2` rotate the bodies' frames to the compared frames (sites' orientations, identity
    for bodies) and `relative` is the relative rotation R_rel of MuJoCo's weld. For joint,
    joint1/joint2 index `Tree.joints` (joint2 −1: none) and `coefficients` the polynomial.
    """

    name: str
    kind: str
    body1: int = 0
    body2: int = 0
    point1: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    point2: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    frame1: np.ndarray = dataclasses.field(default_factory=lambda: np.eye(3))
    frame2: np.ndarray = dataclasses.field(default_factory=lambda: np.eye(3))
    relative: np.ndarray = dataclasses.field(default_factory=lambda: np.eye(3))
    joint1: int = -1
    joint2: int = -1
    coefficients: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(5))

    @property
    def rows(self) -> int:
        """Number of constraint rows: 3 (connect), 6 (weld), 1 (joint)."""
        return {"connect": 3, "weld": 6, "joint": 1}[self.kind]


@dataclasses.dataclass(frozen=True, eq=False)
class Actuator:
    """A MuJoCo actuator on a hinge or slide joint without activation dynamics (`motor`,
    `position`, `velocity`, `general` with fixed gain and affine bias):

        l = g q,  f = gain u + b₀ + b₁ l + b₂ g v,  Q_joint = g f,

    u the control (clamped to `ctrlrange` where limited), f clamped to `forcerange` where
    limited, g the gear, v the joint's `qvel` (MuJoCo's `mj_fwdActuation` for a joint
    transmission). The gain and the bias b are parameters `"<actuator>.gain"`, `".bias"`.
    """

    name: str
    joint: int
    gear: float
    ctrlrange: tuple[float, float] | None
    forcerange: tuple[float, float] | None


class Kinematics(NamedTuple):
    """A tree's kinematics at one concrete state (NumPy, `Tree.kinematics_at`): every body's
    frame (`x`, `R`) and principal inertia frame (`com`, `irot`), world included, and the
    moving bodies' centre-of-mass velocities `v` and principal-frame angular velocities
    `omega` (`Tree.body_velocities`)."""

    x: np.ndarray
    R: np.ndarray
    com: np.ndarray
    irot: np.ndarray
    v: np.ndarray
    omega: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Tree:
    """The static part of an imported model: topology, frames, joints, closures (NumPy).

    Bodies are numbered as in MuJoCo, 0 the world; `parent[b] < b`. Physical parameters
    (masses, inertias, damping, armature, stiffness, spring references, gravity) are not
    here but in the parameter dict, keyed by `param_key`, so `jax.grad` reaches them.
    """

    body_names: tuple[str, ...]
    parent: tuple[int, ...]
    body_pos: np.ndarray  # (nbody, 3)
    body_rot: np.ndarray  # (nbody, 3, 3) of body_quat
    body_ipos: np.ndarray  # (nbody, 3)
    body_irot: np.ndarray  # (nbody, 3, 3) of body_iquat
    joints: tuple[TreeJoint, ...]
    closures: tuple[Closure, ...]
    completion: np.ndarray  # J̄ per quaternion joint (free and ball, in joint order)
    springs: tuple[bool, ...]  # per joint: has a spring (stiffness key present)
    actuators: tuple[Actuator, ...]
    nq: int
    nv: int

    @property
    def quaternion_joints(self) -> tuple[TreeJoint, ...]:
        """The joints with a quaternion (free and ball), in joint order."""
        return tuple(j for j in self.joints if j.kind in (FREE, BALL))

    def coordinate_names(self) -> tuple[str, ...]:
        """Names of q: the joint's name for a hinge or slide, with suffixes for a quaternion
        (`.qw .qx .qy .qz`) and a free joint's position (`.x .y .z`)."""
        names: list[str] = []
        for j in self.joints:
            if j.kind in (HINGE, SLIDE):
                names.append(j.name)
            else:
                if j.kind == FREE:
                    names += [f"{j.name}.{c}" for c in "xyz"]
                names += [f"{j.name}.q{c}" for c in "wxyz"]
        return tuple(names)

    def constraint_groups(self) -> dict[str, tuple[int, ...]]:
        """Group name → rows: `"normalization"` first (one row per quaternion), then each
        closure by its name."""
        groups: dict[str, tuple[int, ...]] = {}
        row = len(self.quaternion_joints)
        if row:
            groups[NORMALIZATION] = tuple(range(row))
        for c in self.closures:
            groups[c.name] = tuple(range(row, row + c.rows))
            row += c.rows
        return groups

    # --- kinematics -------------------------------------------------------------------

    def frames(self, q: Array) -> tuple[Array, Array]:
        """Body frames (x, R) of every body, world included: (nbody, 3), (nbody, 3, 3)."""
        xs, Rs = [jnp.zeros(3, q.dtype)], [jnp.eye(3, dtype=q.dtype)]
        by_body: dict[int, list[TreeJoint]] = {}
        for j in self.joints:
            by_body.setdefault(j.body, []).append(j)
        for b in range(1, len(self.body_names)):
            xp, Rp = xs[self.parent[b]], Rs[self.parent[b]]
            x = xp + Rp @ self.body_pos[b]
            R = Rp @ self.body_rot[b]
            for j in by_body.get(b, ()):
                x, R = _apply_joint(j, q, x, R)
            xs.append(x)
            Rs.append(R)
        return jnp.stack(xs), jnp.stack(Rs)

    def inertial_frames(self, q: Array) -> tuple[Array, Array]:
        """Centres of mass and principal inertia frames of every body, world included."""
        x, R = self.frames(q)
        com = x + jnp.einsum("bij,bj->bi", R, self.body_ipos)
        return com, R @ self.body_irot

    @functools.cached_property
    def _kinematics(self) -> Callable[[Array, Array], tuple[Array, ...]]:
        """`frames`, `inertial_frames` and `body_velocities` as one jitted function: the
        import evaluates them at concrete states several times, one compilation for all."""

        def kinematics(q: Array, qd: Array) -> tuple[Array, ...]:
            v, omega, _ = self.body_velocities(q, qd)
            return (*self.frames(q), *self.inertial_frames(q), v, omega)

        return quick_jit(kinematics)

    def kinematics_at(self, q: Array, qd: Array | None = None) -> Kinematics:
        """The frames, inertial frames and body velocities at the concrete state (q, q̇)
        (q̇ zero by default), as NumPy arrays (`Kinematics`)."""
        q = jnp.asarray(q, dtype=float)
        qd = jnp.zeros_like(q) if qd is None else jnp.asarray(qd, dtype=float)
        return Kinematics(*(np.asarray(a) for a in self._kinematics(q, qd)))

    def velocities(self, q: Array, qd: Array) -> Array:
        """MuJoCo's `qvel` of (q, q̇): q̇ for hinges, slides and positions, ω = 2G(e)ė for
        quaternions (in the child's frame)."""
        parts = []
        for j in self.joints:
            a = j.qadr
            if j.kind in (HINGE, SLIDE):
                parts.append(qd[a : a + 1])
                continue
            if j.kind == FREE:
                parts.append(qd[a : a + 3])
                a += 3
            parts.append(2 * body_rate_matrix(q[a : a + 4]) @ qd[a : a + 4])
        return jnp.concatenate(parts) if parts else jnp.zeros(0, q.dtype)

    def rates(self, q: Array, v: Array) -> Array:
        """q̇ of (q, qvel): the inverse of `velocities` on eᵀė = 0, ė = ½ G(ê)ᵀ ω with ê the
        normalised quaternion (so ė is tangent to the unit sphere)."""
        parts = []
        for j in self.joints:
            if j.kind in (HINGE, SLIDE):
                parts.append(v[j.vadr : j.vadr + 1])
                continue
            a, d = j.qadr, j.vadr
            if j.kind == FREE:
                parts.append(v[d : d + 3])
                a, d = a + 3, d + 3
            e = q[a : a + 4] / jnp.linalg.norm(q[a : a + 4])
            parts.append(0.5 * body_rate_matrix(e).T @ v[d : d + 3])
        return jnp.concatenate(parts) if parts else jnp.zeros(0, q.dtype)

    def normalized(self, q: Array) -> Array:
        """q with every quaternion scaled to unit norm (MuJoCo's `mj_normalizeQuat`)."""
        for j in self.quaternion_joints:
            a = j.qadr + (3 if j.kind == FREE else 0)
            q = q.at[a : a + 4].set(q[a : a + 4] / jnp.linalg.norm(q[a : a + 4]))
        return q

    # --- energies and forces ----------------------------------------------------------

    def _masses(self, p: dict) -> tuple[Array, Array]:
        mass = jnp.stack([jnp.asarray(p[param_key(n, "mass")]) for n in self.body_names[1:]])
        inertia = jnp.stack([jnp.asarray(p[param_key(n, "inertia")]) for n in self.body_names[1:]])
        return mass, inertia

    def body_velocities(self, q: Array, qd: Array) -> tuple[Array, Array, Array]:
        """w = W(q) q̇ of the module docstring, in three parts: the centres of mass'
        velocities ẋ_b (nb, 3), the angular velocities ω_b in the principal frames (nb, 3)
        (the vee of R_bᵀ Ṙ_b, by one jvp of `inertial_frames`), and the quaternion rates
        2 eᵀė of the completion (one per quaternion joint); w is linear in q̇."""
        (_, R), (com_dot, R_dot) = jax.jvp(self.inertial_frames, (q,), (qd,))
        W = jnp.einsum("bki,bkj->bij", R[1:], R_dot[1:])  # Rᵀ Ṙ = ω̃ in the principal frame
        omega = 0.5 * jnp.stack(
            [W[:, 2, 1] - W[:, 1, 2], W[:, 0, 2] - W[:, 2, 0], W[:, 1, 0] - W[:, 0, 1]], axis=-1
        )
        rates = [
            2 * q[a : a + 4] @ qd[a : a + 4]
            for a in (j.qadr + (3 if j.kind == FREE else 0) for j in self.quaternion_joints)
        ]
        return com_dot[1:], omega, jnp.stack(rates) if rates else jnp.zeros(0, q.dtype)

    def kinetic_energy(self, q: Array, qd: Array, p: dict) -> Array:
        """T of the module docstring (bodies, armature, quaternion completion)."""
        v, omega, rates = self.body_velocities(q, qd)
        mass, inertia = self._masses(p)
        T = 0.5 * jnp.sum(mass * jnp.sum(v**2, axis=-1)) + 0.5 * jnp.sum(inertia * omega**2)
        if self.joints:
            T = T + 0.5 * jnp.sum(self._per_dof(p, "armature") * self.velocities(q, qd) ** 2)
        return T + 0.5 * jnp.sum(jnp.asarray(self.completion) * rates**2)

    def _weighted(self, p: dict, v, omega, rates, qvel) -> tuple:
        """D w: the parts of w times their masses, principal inertias, J̄ and armatures."""
        mass, inertia = self._masses(p)
        arm = self._per_dof(p, "armature") if self.joints else qvel
        return mass[:, None] * v, inertia * omega, jnp.asarray(self.completion) * rates, arm * qvel

    def _all_velocities(self, q: Array, qd: Array) -> tuple:
        return (*self.body_velocities(q, qd), self.velocities(q, qd))

    def velocity_jacobian(self, q: Array) -> tuple[Array, Array, Array, Array]:
        """W = ∂w/∂q̇ in the parts of `_all_velocities`, each with a leading axis of n: w at
        the unit vectors (w is linear in q̇), n jvps of the forward kinematics at once."""
        eye = jnp.eye(q.shape[0], dtype=q.dtype)
        return jax.vmap(lambda qd: self._all_velocities(q, qd))(eye)

    def mass_matrix(self, q: Array, p: dict) -> Array:
        """M = Wᵀ D W = ∂²T/∂q̇²."""
        W = self.velocity_jacobian(q)
        DW = self._weighted(p, *W)
        M = sum(jnp.einsum("i...,j...->ij", a, b) for a, b in zip(W, DW, strict=True))
        return (M + M.T) / 2

    def generalized_forces(self, q: Array, qd: Array, p: dict) -> Array:
        """Q = Wᵀ (f − D Ẇq̇ − (0, ω × Iω, 0, 0)) − ∂V_spring/∂q: the Newton–Euler equations
        of the bodies projected on q̇ (Kane's form; Attia 2005 eq 6.4 with a body-level M),
        equal to the Lagrange equations of T. The applied f are gravity m g at the centres of
        mass and damping −c v on `qvel`; the bias Ẇq̇ is one jvp in q at fixed q̇, so every
        term but the joint springs uses the one W."""
        W = self.velocity_jacobian(q)
        w, bias = jax.jvp(lambda q_: self._all_velocities(q_, qd), (q,), (qd,))
        mass, inertia = self._masses(p)
        inertial = self._weighted(p, *bias)
        f = (
            mass[:, None] * jnp.asarray(p["gravity"]) - inertial[0],
            -inertial[1] - cross(w[1], inertia * w[1]),
            -inertial[2],
            -inertial[3] - (self._per_dof(p, "damping") * w[3] if self.joints else 0.0),
        )
        Q = sum(jnp.einsum("i...,...->i", a, b) for a, b in zip(W, f, strict=True))
        return Q - jax.grad(self._spring_energy)(q, p)

    def actuator_forces(self, u: Array, q: Array, qd: Array, p: dict) -> Array:
        """Q of the actuators (`Actuator`) for the controls u, one per actuator."""
        Q = jnp.zeros_like(q)
        for i, a in enumerate(self.actuators):
            j = self.joints[a.joint]
            control = u[i] if a.ctrlrange is None else jnp.clip(u[i], *a.ctrlrange)
            bias = jnp.asarray(p[param_key(a.name, "bias")])
            f = (
                p[param_key(a.name, "gain")] * control
                + bias[0]
                + bias[1] * a.gear * q[j.qadr]
                + bias[2] * a.gear * qd[j.qadr]
            )
            if a.forcerange is not None:
                f = jnp.clip(f, *a.forcerange)
            Q = Q.at[j.qadr].add(a.gear * f)
        return Q

    def potential_energy(self, q: Array, p: dict) -> Array:
        """V of the module docstring (gravity at the centres of mass, joint springs)."""
        com, _ = self.inertial_frames(q)
        mass, _ = self._masses(p)
        return self._spring_energy(q, p) - jnp.sum(mass * (com[1:] @ jnp.asarray(p["gravity"])))

    def _spring_energy(self, q: Array, p: dict) -> Array:
        V = jnp.zeros((), q.dtype)
        for j, spring in zip(self.joints, self.springs, strict=True):
            if not spring:
                continue
            k = p[param_key(j.name, "stiffness")]
            ref = jnp.asarray(p[param_key(j.name, "springref")])
            a = j.qadr
            if j.kind in (HINGE, SLIDE):
                V = V + 0.5 * k * (q[a] - ref) ** 2
                continue
            if j.kind == FREE:
                V = V + 0.5 * k * jnp.sum((q[a : a + 3] - ref[:3]) ** 2)
                a, ref = a + 3, ref[3:]
            V = V + 0.5 * k * _rotation_angle_squared(q[a : a + 4], ref)
        return V

    def _per_dof(self, p: dict, field: str) -> Array:
        return jnp.concatenate(
            [jnp.atleast_1d(jnp.asarray(p[param_key(j.name, field)])) for j in self.joints]
        )

    # --- constraints ------------------------------------------------------------------

    def constraints(self, q: Array) -> Array:
        """[eᵀe − 1 per quaternion ; closure rows], in `constraint_groups` order."""
        rows = []
        for j in self.quaternion_joints:
            a = j.qadr + (3 if j.kind == FREE else 0)
            rows.append(jnp.atleast_1d(q[a : a + 4] @ q[a : a + 4] - 1.0))
        x, R = self.frames(q) if self.closures else (None, None)
        for c in self.closures:
            rows.append(_closure_rows(self, c, q, x, R))
        return jnp.concatenate(rows)

    @property
    def n_constraints(self) -> int:
        """Number of holonomic rows."""
        return len(self.quaternion_joints) + sum(c.rows for c in self.closures)


def param_key(owner: str, field: str) -> str:
    """The parameter key of a body's or joint's physical quantity: `"<name>.<field>"`."""
    return f"{owner}.{field}"


def _axis_rotation(axis: np.ndarray, angle: Array) -> Array:
    """Rodrigues: Rot(a, θ) = I + sin θ ã + (1 − cos θ) ã² for a unit axis a."""
    K = jnp.asarray([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return jnp.eye(3) + jnp.sin(angle) * K + (1 - jnp.cos(angle)) * (K @ K)


def _apply_joint(j: TreeJoint, q: Array, x: Array, R: Array) -> tuple[Array, Array]:
    """One step of MuJoCo's `mj_kinematics` (module docstring), j's coordinates read off q."""
    return joint_motion(j, q[j.qadr : j.qadr + NQ[j.kind]], x, R)


def joint_motion(j: TreeJoint, value: Array, x: Array, R: Array) -> tuple[Array, Array]:
    """The frame (x, R) moved by joint j at its coordinates `value` (its `qpos`: shape (1,)
    for a hinge or slide, (4,) a ball, (7,) a free joint): one step of MuJoCo's
    `mj_kinematics` (module docstring). A ball's quaternion enters by `parameter_rotation`,
    whatever its norm."""
    if j.kind == FREE:
        return value[:3], parameter_rotation(value[3:7])
    if j.kind == SLIDE:
        return x + R @ j.axis * (value[0] - j.ref[0]), R
    anchor = x + R @ j.pos
    local = (
        _axis_rotation(j.axis, value[0] - j.ref[0])
        if j.kind == HINGE
        else parameter_rotation(value[:4])
    )
    R = R @ local
    return anchor - R @ j.pos, R


def _rotation_angle_squared(e: Array, ref: Array) -> Array:
    """|θ|² of the rotation vector θ of r⁻¹ ê (MuJoCo's `mju_subQuat(ê, r)`, ê = e/|e|):
    with (w, u) = r⁻¹ ê, |θ| = 2 atan2(|u|, |w|) (the shorter rotation), evaluated so that
    its gradient is finite at θ = 0 (the series 4|u|²/w² there)."""
    r = ref / jnp.sqrt(ref @ ref)
    e = e / jnp.sqrt(e @ e)
    w = r[0] * e[0] + r[1:] @ e[1:]
    u = r[0] * e[1:] - e[0] * r[1:] - cross(r[1:], e[1:])
    s2 = u @ u
    small = s2 < 1e-16
    s = jnp.sqrt(jnp.where(small, 1.0, s2))
    angle_over_s = jnp.where(small, 1.0 / jnp.abs(w), jnp.arctan2(s, jnp.abs(w)) / s)
    return 4.0 * s2 * angle_over_s**2


def vee(W: Array) -> Array:
    """vee(½(W − Wᵀ)): the axial vector of W's skew-symmetric part (a weld's rotation rows)."""
    return 0.5 * jnp.stack([W[2, 1] - W[1, 2], W[0, 2] - W[2, 0], W[1, 0] - W[0, 1]])


def _closure_rows(tree: Tree, c: Closure, q: Array, x: Array, R: Array) -> Array:
    if c.kind == "joint":
        j1 = tree.joints[c.joint1]
        lhs = q[j1.qadr] - j1.ref[0]
        if c.joint2 < 0:
            return jnp.atleast_1d(lhs - c.coefficients[0])
        j2 = tree.joints[c.joint2]
        d = q[j2.qadr] - j2.ref[0]
        poly = sum(ck * d**k for k, ck in enumerate(c.coefficients))
        return jnp.atleast_1d(lhs - poly)
    p1 = x[c.body1] + R[c.body1] @ c.point1
    p2 = x[c.body2] + R[c.body2] @ c.point2
    if c.kind == "connect":
        return p1 - p2
    E = (R[c.body2] @ c.frame2).T @ (R[c.body1] @ c.frame1) @ c.relative
    return jnp.concatenate([p1 - p2, vee(E)])
