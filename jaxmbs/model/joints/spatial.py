"""Spatial rigid bodies in absolute coordinates (centre of mass, ZXZ Euler angles) and joints.

Body i owns q[6i : 6i+6] = (x, y, z, φ, θ, ψ): the centre of mass r_i and the Euler angles of
its local frame for consecutive rotations about z, x and z (Pękal–Frączek 2016, §1):

    A(φ, θ, ψ) = R_z(φ) R_x(θ) R_z(ψ).

A point with local coordinates s is at r_i + A s; "ground" is body `None`, whose local
coordinates are global ones. With Euler angles the mass matrix is nonsingular except at the
gimbal lock sin θ = 0; choose body frames so that θ stays away from 0 and π (e.g. a body's local
z axis horizontal, θ = π/2, in its working position).

Kinetic energy (Lagrangian form, `Mechanism.from_lagrangian`):

    T = Σ ½ mᵢ |ṙᵢ|² + ½ ω'ᵢᵀ Jᵢ ω'ᵢ,

with the body-frame angular velocity ω' read off the skew-symmetric matrix Aᵀ Ȧ, where
Ȧ = Σₖ (∂A/∂eₖ) ėₖ with ∂A/∂e from forward-mode autodiff of `rotation`. The mass matrix and
the gyroscopic and centrifugal terms then come by autodiff; no angular-velocity matrix is
written by hand. Joints only write Φ; applied forces at points and torques become generalized
forces through the transposed Jacobian of the point position (or of ω) by a vjp.

Geometry and inertia may be numbers, keys into a dict of parameters, or callables of the
parameters, so that `jax.grad` reaches them: `Body("arm", mass="m1", inertia="J1")`. An inertia
is a scalar (isotropic), three principal moments, or a 3×3 tensor, in the body frame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.types import Array
from ..mechanism import Mechanism
from ._common import PointPair, Spec, cos_sin, split_joints, value
from .forces import BodyKinematics, ElementSet, ForceElement, check_elements

COORDINATES = ("x", "y", "z", "phi", "theta", "psi")


def matvec(A, v) -> Array:
    """A v for 3×3 matrices, as an elementwise product and a sum.

    XLA on CPU does not fuse tiny `dot` operations; this form fuses with its neighbours, which
    makes the many 3-vector operations of the joints several times cheaper.
    """
    return jnp.sum(A * v[..., None, :], axis=-1)


def dot(a, b) -> Array:
    """aᵀ b of 3-vectors (fusible, see `matvec`)."""
    return jnp.sum(a * b, axis=-1)


def rotation(angles) -> Array:
    """Rotation matrix A = R_z(φ) R_x(θ) R_z(ψ) of ZXZ Euler angles (φ, θ, ψ).

    Vectorised: `angles` of shape (..., 3) gives matrices of shape (..., 3, 3).
    """
    c, s = cos_sin(angles)
    cf, ct, cp = c[..., 0], c[..., 1], c[..., 2]
    sf, st, sp = s[..., 0], s[..., 1], s[..., 2]
    rows = (
        (cf * cp - sf * ct * sp, -cf * sp - sf * ct * cp, sf * st),
        (sf * cp + cf * ct * sp, -sf * sp + cf * ct * cp, -cf * st),
        (st * sp, st * cp, ct),
    )
    return jnp.stack([jnp.stack(row, axis=-1) for row in rows], axis=-2)


def euler_angles(matrix) -> np.ndarray:
    """ZXZ Euler angles (φ, θ, ψ) of a rotation matrix, θ ∈ [0, π] (NumPy, outside jit).

    The third column of A is (sin φ sin θ, −cos φ sin θ, cos θ) and its third row
    (sin θ sin ψ, sin θ cos ψ, cos θ). Raises `ValueError` at the gimbal lock (sin θ ≈ 0).
    """
    A = np.asarray(matrix, dtype=float)
    if A.shape != (3, 3) or not np.allclose(A.T @ A, np.eye(3), atol=1e-10):
        raise ValueError("euler_angles needs a 3×3 rotation matrix")
    theta = np.arccos(np.clip(A[2, 2], -1.0, 1.0))
    if np.sin(theta) < 1e-8:
        raise ValueError("gimbal lock: the ZXZ angles φ and ψ are not defined at sin θ = 0")
    return np.array([np.arctan2(A[0, 2], -A[1, 2]), theta, np.arctan2(A[2, 0], A[2, 1])])


def pose(position, matrix) -> np.ndarray:
    """Body coordinates (x, y, z, φ, θ, ψ) of a centre of mass and a frame orientation."""
    return np.concatenate([np.asarray(position, dtype=float), euler_angles(matrix)])


class Frames(NamedTuple):
    """Positions (N, 3) and rotation matrices (N, 3, 3) of all bodies at one configuration,
    computed once and shared by every joint."""

    positions: Array
    rotations: Array

    def point(self, body: int | None, local) -> Array:
        """Global position of a point given in the body's local frame (ground: global)."""
        if body is None:
            return local
        return self.positions[body] + matvec(self.rotations[body], local)

    def vector(self, body: int | None, local) -> Array:
        """A body-fixed vector in global components (ground: unchanged)."""
        return local if body is None else matvec(self.rotations[body], local)


def body_frames(q) -> Frames:
    """The frames of all bodies from q = (r₁, φ₁, θ₁, ψ₁, r₂, …)."""
    qb = q.reshape(-1, 6)
    return Frames(qb[:, :3], rotation(qb[:, 3:]))


def point(q, body: int | None, local) -> Array:
    """Global position of a point given in the body's local frame (ground: global)."""
    if body is None:
        return local
    return q[6 * body : 6 * body + 3] + matvec(rotation(q[6 * body + 3 : 6 * body + 6]), local)


def rotation_derivatives(angles) -> Array:
    """∂A/∂eₖ of the rotation matrix, shape (..., 3, 3, 3) (last axis k), by forward-mode
    autodiff of `rotation`."""
    flat = angles.reshape(-1, 3)
    dA = jax.vmap(jax.jacfwd(rotation))(flat)
    return dA.reshape(*angles.shape[:-1], 3, 3, 3)


def body_angular_velocity(angles, rates) -> Array:
    """Angular velocity ω' in the body frame from Euler angles and their rates, shape (..., 3).

    ω̃' = Aᵀ Ȧ with Ȧ = Σₖ (∂A/∂eₖ) ėₖ (`rotation_derivatives`); the antisymmetric part is
    taken, so round-off cannot leak a symmetric component. The rates enter only through this
    sum, so ∂²T/∂ė² needs ∂A/∂e once rather than once per rate direction.
    """
    A = rotation(angles)
    A_dot = jnp.sum(rotation_derivatives(angles) * rates[..., None, None, :], axis=-1)
    W = jnp.sum(A[..., :, :, None] * A_dot[..., :, None, :], axis=-3)
    return 0.5 * jnp.stack(
        [W[..., 2, 1] - W[..., 1, 2], W[..., 0, 2] - W[..., 2, 0], W[..., 1, 0] - W[..., 0, 1]],
        axis=-1,
    )


def angular_velocity(q, qd, body: int) -> Array:
    """Angular velocity ω = A ω' of a body in global components."""
    angles, rates = q[6 * body + 3 : 6 * body + 6], qd[6 * body + 3 : 6 * body + 6]
    return matvec(rotation(angles), body_angular_velocity(angles, rates))


def inertia_tensor(spec: Spec, params) -> Array:
    """3×3 inertia tensor from a scalar (isotropic), 3 principal moments, or a tensor."""
    J = value(spec, params)
    if J.ndim == 0:
        return J * jnp.eye(3, dtype=J.dtype)
    if J.shape == (3,):
        return jnp.diag(J)
    if J.shape == (3, 3):
        return J
    raise ValueError(f"an inertia must be a scalar, 3 moments or a 3×3 tensor; got {J.shape}")


def perpendicular_pair(axis) -> tuple[Array, Array]:
    """Unit vectors u, v with (â, u, v) right-handed orthonormal, â = axis / |axis|.

    The helper direction is the coordinate axis least aligned with â, so u and v are smooth
    in the axis (they are differentiable with respect to a parametrised axis).
    """
    a = axis / jnp.linalg.norm(axis)
    helper = jnp.eye(3, dtype=a.dtype)[jnp.argmin(jnp.abs(a))]
    u = jnp.cross(a, helper)
    u = u / jnp.linalg.norm(u)
    return u, jnp.cross(a, u)


@dataclasses.dataclass(frozen=True)
class Body:
    """A spatial rigid body: mass and centroidal inertia in its frame (number, key, callable)."""

    name: str
    mass: Spec
    inertia: Spec


class _TwoBodyJoint:
    """Geometry shared by the joints: points and body-fixed vectors of bodies i and j.

    A joint's rows are `residual(frames, p)`; calling it as `joint(t, q, p)` evaluates them
    at a configuration q (the builder computes the frames once for all joints).
    """

    #: Spatial joints write holonomic rows Φ (their number: each joint's `rows`).
    holonomic: ClassVar[bool] = True

    def __call__(self, t, q, p) -> Array:
        return self.residual(body_frames(q), p)

    def residual(self, frames: Frames, p) -> Array:
        raise NotImplementedError

    def _p(self, frames: Frames, p, side: str) -> Array:
        body, local = getattr(self, f"body_{side}"), getattr(self, f"point_{side}")
        return frames.point(body, value(local, p))

    def _separation(self, frames: Frames, p) -> Array:
        """d = P_j − P_i."""
        return self._p(frames, p, "j") - self._p(frames, p, "i")

    def _axis(self, frames: Frames, p, side: str) -> Array:
        body, local = getattr(self, f"body_{side}"), getattr(self, f"axis_{side}")
        return frames.vector(body, value(local, p))

    def _normals_i(self, frames: Frames, p) -> tuple[Array, Array]:
        """The pair perpendicular to axis_i, carried by body i."""
        u, v = perpendicular_pair(value(self.axis_i, p))
        return frames.vector(self.body_i, u), frames.vector(self.body_i, v)

    def _parallel_rows(self, frames: Frames, p) -> Array:
        """axis_j ∥ axis_i: uᵢ·aⱼ = vᵢ·aⱼ = 0 (2 rows)."""
        u, v = self._normals_i(frames, p)
        a_j = self._axis(frames, p, "j")
        return jnp.stack([dot(u, a_j), dot(v, a_j)])

    def _on_line_rows(self, frames: Frames, p) -> Array:
        """P_j on the line through P_i along axis_i: uᵢ·d = vᵢ·d = 0 (2 rows)."""
        u, v = self._normals_i(frames, p)
        d = self._separation(frames, p)
        return jnp.stack([dot(u, d), dot(v, d)])


@dataclasses.dataclass(frozen=True)
class _PointLineJoint(_TwoBodyJoint):
    """A joint between a line of body i (through point_i along axis_i) and point_j of body j."""

    name: str
    body_i: int | None
    point_i: Spec
    axis_i: Spec
    body_j: int | None
    point_j: Spec


@dataclasses.dataclass(frozen=True)
class _AxisJoint(_PointLineJoint):
    """A joint between a point and an axis fixed on each of bodies i and j."""

    axis_j: Spec


@dataclasses.dataclass(frozen=True)
class Spherical(_TwoBodyJoint):
    """Spherical (ball) joint: point_i on body_i coincides with point_j on body_j (3 rows)."""

    name: str
    body_i: int | None
    point_i: Spec
    body_j: int | None = None
    point_j: Spec = (0.0, 0.0, 0.0)
    rows: ClassVar[int] = 3

    def residual(self, frames, p) -> Array:
        return -self._separation(frames, p)


@dataclasses.dataclass(frozen=True)
class Revolute(_AxisJoint):
    """Revolute joint: a common point and parallel axes (3 + 2 rows; one relative rotation).

    Rows: P_i − P_j = 0, and uᵢ·aⱼ = vᵢ·aⱼ = 0 with uᵢ, vᵢ perpendicular to axis_i
    (Haug 1989, spherical joint plus two dot-1 conditions).
    """

    rows: ClassVar[int] = 5

    def residual(self, frames, p) -> Array:
        return jnp.concatenate([-self._separation(frames, p), self._parallel_rows(frames, p)])


@dataclasses.dataclass(frozen=True)
class Universal(_AxisJoint):
    """Universal (Cardan) joint: a common point and perpendicular cross axes (3 + 1 rows).

    Rows: P_i − P_j = 0 and aᵢ·aⱼ = 0 (axis_i on body i, axis_j on body j).
    """

    rows: ClassVar[int] = 4

    def residual(self, frames, p) -> Array:
        cross = dot(self._axis(frames, p, "i"), self._axis(frames, p, "j"))
        return jnp.concatenate([-self._separation(frames, p), cross[None]])


@dataclasses.dataclass(frozen=True)
class Cylindrical(_AxisJoint):
    """Cylindrical joint: P_j on the axis of body i through P_i, axes parallel (2 + 2 rows).

    Leaves a relative sliding and a relative rotation about the common axis.
    """

    rows: ClassVar[int] = 4

    def residual(self, frames, p) -> Array:
        return jnp.concatenate([self._on_line_rows(frames, p), self._parallel_rows(frames, p)])


@dataclasses.dataclass(frozen=True)
class Translational(_TwoBodyJoint):
    """Translational (prismatic) joint: sliding along axis_i only (2 + 2 + 1 rows).

    Rows: P_j on the line of body i (uᵢ·d = vᵢ·d = 0), parallel axes (uᵢ·aⱼ = vᵢ·aⱼ = 0),
    and no twist: normal_j stays parallel to normal_i (vᵢ·nⱼ = 0), where uᵢ is normal_i made
    perpendicular to axis_i and vᵢ = âᵢ × uᵢ. The normals are any vectors perpendicular to the
    axes that coincide in the assembled position.
    """

    name: str
    body_i: int | None
    point_i: Spec
    axis_i: Spec
    normal_i: Spec
    body_j: int | None
    point_j: Spec
    axis_j: Spec
    normal_j: Spec
    rows: ClassVar[int] = 5

    def _normals_i(self, frames, p):
        a = value(self.axis_i, p)
        a = a / jnp.linalg.norm(a)
        n = value(self.normal_i, p)
        u = n - dot(n, a) * a
        u = u / jnp.linalg.norm(u)
        return frames.vector(self.body_i, u), frames.vector(self.body_i, jnp.cross(a, u))

    def residual(self, frames, p) -> Array:
        _, v = self._normals_i(frames, p)
        twist = dot(v, frames.vector(self.body_j, value(self.normal_j, p)))
        rows = (self._on_line_rows(frames, p), self._parallel_rows(frames, p), twist[None])
        return jnp.concatenate(rows)


@dataclasses.dataclass(frozen=True)
class Distance(_TwoBodyJoint, PointPair):
    """Distance constraint |P_j − P_i|² − L² = 0: a massless rod with spherical ends (1 row)."""

    length: Spec
    rows: ClassVar[int] = 1

    def residual(self, frames, p) -> Array:
        d = self._separation(frames, p)
        return jnp.atleast_1d(dot(d, d) - value(self.length, p) ** 2)


@dataclasses.dataclass(frozen=True)
class PointOnLine(_PointLineJoint):
    """Point P_j of body j stays on the line of body i through P_i along axis_i (2 rows)."""

    rows: ClassVar[int] = 2

    def residual(self, frames, p) -> Array:
        return self._on_line_rows(frames, p)


Joint = Spherical | Revolute | Universal | Cylindrical | Translational | Distance | PointOnLine


def _load_value(load, t, q, qd, p) -> Array:
    f = load.value
    return jnp.asarray(f(t, q, qd, p)) if callable(f) else value(f, p)


@dataclasses.dataclass(frozen=True)
class PointForce:
    """A force acting at a point of a body, in global components.

    `value` is a constant vector (numbers or a parameter key) or a callable
    `(t, q, qd, p) -> (3,)` (note: loads receive the state, not only the parameters). Its
    generalized force is (∂r_P/∂q)ᵀ F, one vjp of the point position.
    """

    name: str
    body: int
    point: Spec
    value: Spec | Callable

    def generalized(self, t, q, qd, p) -> Array:
        _, pullback = jax.vjp(lambda q_: point(q_, self.body, value(self.point, p)), q)
        return pullback(_load_value(self, t, q, qd, p).astype(q.dtype))[0]

    def power(self, t, q, qd, p) -> Array:
        """F · ṙ_P."""
        _, velocity = jax.jvp(lambda q_: point(q_, self.body, value(self.point, p)), (q,), (qd,))
        return dot(_load_value(self, t, q, qd, p), velocity)


@dataclasses.dataclass(frozen=True)
class Torque:
    """A torque acting on a body, in global components (`value` as for `PointForce`).

    Its generalized force is (∂ω/∂q̇)ᵀ τ, one vjp of the angular velocity (linear in q̇).
    """

    name: str
    body: int
    value: Spec | Callable

    def generalized(self, t, q, qd, p) -> Array:
        _, pullback = jax.vjp(lambda qd_: angular_velocity(q, qd_, self.body), qd)
        return pullback(_load_value(self, t, q, qd, p).astype(q.dtype))[0]

    def power(self, t, q, qd, p) -> Array:
        """τ · ω."""
        return dot(_load_value(self, t, q, qd, p), angular_velocity(q, qd, self.body))


Load = PointForce | Torque


def load_power(loads: Sequence[Load], t, q, qd, p) -> Array:
    """Total power of the applied loads at a state (gravity excluded: it is potential)."""
    return sum((load.power(t, q, qd, p) for load in loads), start=jnp.zeros((), q.dtype))


def relative_angle(q, body_i: int | None, body_j: int | None, axis_i, reference_i, reference_j):
    """Rotation of body j relative to body i about `axis_i` (body i's frame), in (−π, π].

    With a = Aᵢ âᵢ, and uᵢ = Aᵢ rᵢ, uⱼ = Aⱼ rⱼ the reference vectors projected onto the plane
    normal to a: δ = atan2(a · (uᵢ × uⱼ), uᵢ · uⱼ).
    """
    frames = body_frames(q)
    a = frames.vector(body_i, axis_i / jnp.linalg.norm(axis_i))
    u_i, u_j = frames.vector(body_i, reference_i), frames.vector(body_j, reference_j)
    u_i, u_j = u_i - dot(u_i, a) * a, u_j - dot(u_j, a) * a
    return jnp.arctan2(dot(a, jnp.cross(u_i, u_j)), dot(u_i, u_j))


#: Points and relative angles of spatial bodies, for the force elements.
KINEMATICS = BodyKinematics(point, relative_angle)


def coordinate_names(bodies: Sequence[Body]) -> tuple[str, ...]:
    """`name.x`, `name.y`, `name.z`, `name.phi`, `name.theta`, `name.psi` for every body."""
    return tuple(f"{b.name}.{c}" for b in bodies for c in COORDINATES)


def spatial_mechanism(
    bodies: Sequence[Body],
    joints: Sequence[Joint],
    params=None,
    *,
    gravity: Spec = (0.0, 0.0, -9.81),
    loads: Sequence[Load] = (),
    elements: Sequence[ForceElement] = (),
    applied_forces: Callable | None = None,
    reference_q=None,
    reference_t: float = 0.0,
) -> Mechanism:
    """Assemble spatial bodies and joints into a [`jaxmbs.Mechanism`][] (Lagrangian form).

    T = Σ ½ mᵢ|ṙᵢ|² + ½ ω'ᵢᵀJᵢω'ᵢ and V = −Σ mᵢ gᵀrᵢ go to `Mechanism.from_lagrangian`, so M
    and the velocity-dependent terms are derived by autodiff and the total energy is
    reported. The springs of the force `elements` (`jaxmbs.joints.forces`) add to V, their
    dampers and laws to the generalized forces, as do `loads` (point forces, torques) and
    `applied_forces(t, q, qd, p)`. Each joint is a constraint group, in the given order (holonomic
    joints first). `reference_q` must avoid the gimbal lock (sin θ ≠ 0 for every body).
    """
    bodies = tuple(bodies)
    loads = tuple(loads)
    n_bodies = len(bodies)
    holonomic, pfaffian, groups = split_joints(joints, n_bodies)
    element_set = ElementSet(check_elements(elements, n_bodies), KINEMATICS)
    for load in loads:
        if not 0 <= load.body < n_bodies:
            raise ValueError(f"load {load.name!r} acts on body {load.body}; there are {n_bodies}")

    def masses(p):
        return jnp.stack([value(b.mass, p) for b in bodies])

    def kinetic_energy(q, qd, p):
        m = masses(p).astype(q.dtype)
        J = jnp.stack([inertia_tensor(b.inertia, p) for b in bodies]).astype(q.dtype)
        qb, qdb = q.reshape(n_bodies, 6), qd.reshape(n_bodies, 6)
        omega = body_angular_velocity(qb[:, 3:], qdb[:, 3:])
        translation = jnp.sum(m * jnp.sum(qdb[:, :3] ** 2, axis=1))
        return 0.5 * translation + 0.5 * jnp.sum(omega * matvec(J, omega))

    def potential_energy(q, p):
        positions = q.reshape(n_bodies, 6)[:, :3]
        gravity_potential = -jnp.sum(masses(p) * dot(positions, value(gravity, p)))
        return gravity_potential + element_set.potential(q, p)

    def external_forces(t, q, qd, p):
        out = element_set.nonconservative_force(t, q, qd, p)
        for load in loads:
            out = out + load.generalized(t, q, qd, p)
        if applied_forces is not None:
            out = out + applied_forces(t, q, qd, p)
        return out

    def constraints(t, q, p):
        frames = body_frames(q)
        rows = [
            j.residual(frames, p) if isinstance(j, _TwoBodyJoint) else j(t, q, p) for j in holonomic
        ]
        return jnp.concatenate(rows)

    def velocity_constraints(t, q, qd, p):
        return jnp.concatenate([j(t, q, qd, p) for j in pfaffian])

    # Each model function is jit-wrapped: traced once and reused by every derivative that
    # needs it, and evaluated as one compiled call (not primitive by primitive) when the
    # structure and the mass matrix are checked eagerly at the reference configuration.
    return Mechanism.from_lagrangian(
        jax.jit(kinetic_energy),
        jax.jit(potential_energy),
        jax.jit(constraints) if holonomic else None,
        jax.jit(velocity_constraints) if pfaffian else None,
        params,
        external_forces=(
            jax.jit(external_forces)
            if loads or element_set.elements or applied_forces is not None
            else None
        ),
        elements=element_set if element_set.elements else None,
        coordinate_names=coordinate_names(bodies),
        constraint_groups=groups,
        reference_q=reference_q,
        reference_t=reference_t,
    )
