"""Rolling contact of a spatial body on a plane: a sphere, a thin disc, a torus (tyre).

A body rolls without slipping on the plane through p₀ with normal n (unit; the plane may be
inclined). The body's centre of mass is the centre of the sphere, of the disc, of the torus.
Each rolling joint has a contact point P(q) on the body's surface, P = c + d with c the centre
and d the offset below, and two kinds of rows:

- holonomic, 1 row (constraint group `name`): the contact point lies on the plane,

      Φ = nᵀ (c + d − p₀) = 0;

- Pfaffian, 2 rows (constraint group `name + ".no_slip"`): the body's material point at P has
  no velocity along the plane,

      ψ = [t₁ᵀ v_P ; t₂ᵀ v_P] = 0,   v_P = ċ + ω × d,

  with (n, t₁, t₂) orthonormal (`spatial.perpendicular_pair(n)`). v_P is the derivative of
  the body-fixed point's position along q̇ (a jvp of the frames; the point's body coordinates
  are those of P at q), so it is linear in q̇ and ω is never written by hand.

The normal component nᵀ v_P is left out: it equals Φ̇ (for the sphere d = −r n is constant
in direction; for the disc and the torus P is the lowest point of the rim, so by the
envelope theorem the height of the lowest point moves with the material point at it), so the
three rows are independent and say "no slip" together.

Offsets d, with a = A a'/|a'| the wheel's axis (body frame a') in global axes and
u = (n − (nᵀa) a) / |n − (nᵀa) a| the direction from the contact towards the centre within
the wheel's plane:

- `RollingSphere`, radius r:        d = −r n,        Φ = nᵀ(c − p₀) − r;
- `RollingDisc` (knife edge), r:     d = −r u,        Φ = nᵀ(c − p₀) − r √(1 − (nᵀa)²);
- `RollingTorus`, R, crown ρ:        d = −R u − ρ n,  Φ = nᵀ(c − p₀) − R √(1 − (nᵀa)²) − ρ.

u is undefined when the axis is parallel to n (a wheel lying flat): the joints refuse such a
`reference_q`. The force on the body at P is −λ_Φ n − λ₁ t₁ − λ₂ t₂ (the rows' multipliers):
−λ_Φ is the normal force, the others the friction that keeps it rolling (`contact_force`).

Radii, plane point, plane normal and axis are specs (numbers, keys into `params`, or
callables of them), so `jax.grad` reaches them. Each joint is given to
`spatial.spatial_mechanism` like any other joint; the builder asks it for its two parts
(`parts`), bound to the mechanism's layout.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.linalg import unit
from ..._internal.types import Array
from ..mechanism import Mechanism
from ._common import Spec, geometry, value
from .spatial import Frames, Layout, dot, matvec, perpendicular_pair


@dataclasses.dataclass(frozen=True)
class _Rolling:
    """A body rolling on the plane through `plane_point` with normal `plane_normal`."""

    name: str
    body: int
    _: dataclasses.KW_ONLY
    radius: Spec
    plane_point: Spec = (0.0, 0.0, 0.0)
    plane_normal: Spec = (0.0, 0.0, 1.0)

    def normal(self, p) -> Array:
        """The plane's unit normal n."""
        return unit(geometry(self.plane_normal, p))

    def offset(self, frames: Frames, p) -> Array:
        """d = P − c, the contact point relative to the centre, global axes."""
        raise NotImplementedError

    def clearance(self, frames: Frames, p) -> Array:
        """Φ = nᵀ (c + d − p₀): the contact point's height above the plane."""
        contact = frames.positions[self.body] + self.offset(frames, p)
        return dot(self.normal(p), contact - value(self.plane_point, p))

    def contact_point(self, layout: Layout, q, p) -> Array:
        """The contact point P = c + d at q, global coordinates (an output helper)."""
        frames = layout.frames(q)
        return frames.positions[self.body] + self.offset(frames, p)

    def slip(self, layout: Layout, q, qd, p) -> Array:
        """ψ = [t₁ᵀ v_P ; t₂ᵀ v_P], v_P the velocity of the body's material point at P."""
        frames = layout.frames(q)
        rotation = frames.rotations[self.body]
        local = matvec(rotation.T, self.offset(frames, p))  # P − c in the body frame, at q
        _, velocity = jax.jvp(lambda q_: layout.frames(q_).point(self.body, local), (q,), (qd,))
        t1, t2 = perpendicular_pair(self.normal(p))
        return jnp.stack([dot(t1, velocity), dot(t2, velocity)])

    def contact_force(self, p, lam_contact, lam_no_slip) -> dict[str, Array]:
        """The force on the body at P from the multipliers of its groups (`name`, shape
        (..., 1), and `name + ".no_slip"`, (..., 2)): the normal force N = −λ_Φ (positive
        when the plane pushes), the friction −λ₁ t₁ − λ₂ t₂ and their sum, global axes."""
        n = self.normal(p)
        t1, t2 = perpendicular_pair(n)
        normal_force = -lam_contact[..., 0]
        friction = -lam_no_slip[..., :1] * t1 - lam_no_slip[..., 1:2] * t2
        force = normal_force[..., None] * n + friction
        return {"normal_force": normal_force, "friction": friction, "force": force}

    def _check_spec(self, spec: Spec, what: str, params) -> np.ndarray:
        x = np.asarray(value(spec, params), dtype=float)
        if not np.all(np.isfinite(x)):
            raise ValueError(f"rolling joint {self.name!r}: {what} is not finite: {x}")
        return x

    def check(self, params, layout: Layout, reference_q=None) -> None:
        """Refuse bad geometry before anything compiles (ValueError naming the joint): a
        radius ≤ 0, a zero plane normal, and at `reference_q` a contact point off the plane
        (|Φ| > 1e-8 · (1 + |c|))."""
        if float(self._check_spec(self.radius, "the radius", params)) <= 0:
            raise ValueError(f"rolling joint {self.name!r}: the radius must be positive")
        normal = self._check_spec(self.plane_normal, "the plane normal", params)
        if normal.shape != (3,) or np.linalg.norm(normal) == 0:
            raise ValueError(
                f"rolling joint {self.name!r}: the plane normal must be a nonzero 3-vector"
            )
        self._check_spec(self.plane_point, "the plane point", params)
        if reference_q is None:
            return
        frames = layout.frames(jnp.asarray(reference_q, dtype=float))
        self._check_reference(frames, params)
        gap = float(self.clearance(frames, params))
        scale = 1.0 + float(np.linalg.norm(np.asarray(frames.positions[self.body])))
        if abs(gap) > 1e-8 * scale:
            raise ValueError(
                f"rolling joint {self.name!r}: at reference_q the body is {gap:.3e} "
                "off the plane (its contact point must lie on it; the centre at the radius "
                "above it)"
            )

    def _check_reference(self, frames: Frames, params) -> None:
        """Further checks of the reference configuration (none for a sphere)."""

    def parts(self, layout: Layout, params=None, reference_q=None) -> tuple:
        """The holonomic and the Pfaffian part, bound to `layout`, after `check`."""
        self.check(params, layout, reference_q)
        return (Contact(self.name, self, layout), NoSlip(f"{self.name}.no_slip", self, layout))


@dataclasses.dataclass(frozen=True)
class RollingSphere(_Rolling):
    """A sphere of radius r rolling without slipping on a plane: d = −r n, so
    Φ = nᵀ(c − p₀) − r (1 row) and ψ = tₖᵀ (ċ − r ω × n), k = 1, 2 (2 rows)."""

    def offset(self, frames, p) -> Array:
        return -value(self.radius, p) * self.normal(p)


@dataclasses.dataclass(frozen=True)
class _Wheel(_Rolling):
    """A wheel about its `axis` (body frame): the contact lies below the centre in the wheel's
    plane, d = −R u − ρ n with u = unit(n − (nᵀa) a) and ρ the crown radius."""

    axis: Spec = (0.0, 0.0, 1.0)

    def crown(self, p) -> Array:
        """ρ, the radius of the tyre's cross-section (0: a knife edge)."""
        raise NotImplementedError

    def _towards_centre(self, frames: Frames, p) -> Array:
        """u = unit(n − (nᵀa) a): in the wheel's plane, from the contact to the centre."""
        n = self.normal(p)
        a = frames.vector(self.body, unit(value(self.axis, p)))
        return unit(n - dot(n, a) * a)

    def offset(self, frames, p) -> Array:
        u = self._towards_centre(frames, p)
        return -value(self.radius, p) * u - self.crown(p) * self.normal(p)

    def check(self, params, layout, reference_q=None) -> None:
        """`_Rolling.check` and a zero axis; at `reference_q`, an axis within 1e-6 rad of the
        normal (no lowest rim point: the wheel lies flat)."""
        axis = self._check_spec(self.axis, "the axis", params)
        if axis.shape != (3,) or np.linalg.norm(axis) == 0:
            raise ValueError(f"rolling joint {self.name!r}: the axis must be a nonzero 3-vector")
        super().check(params, layout, reference_q)

    def _check_reference(self, frames, params) -> None:
        n = np.asarray(self.normal(params))
        a = np.asarray(frames.vector(self.body, unit(value(self.axis, params))))
        if np.linalg.norm(np.cross(n, a)) < 1e-6:
            raise ValueError(
                f"rolling joint {self.name!r}: at reference_q the wheel's axis is parallel to "
                "the plane's normal (the wheel lies flat): no contact point is defined"
            )


@dataclasses.dataclass(frozen=True)
class RollingDisc(_Wheel):
    """A thin disc (knife-edge wheel) of radius r about its `axis` a' (body frame) rolling
    without slipping on a plane. d = −r u, u = unit(n − (nᵀa) a), a = A a'/|a'|:
    Φ = nᵀ(c − p₀) − r √(1 − (nᵀa)²) (1 row), ψ = tₖᵀ (ċ − r ω × u), k = 1, 2 (2 rows)."""

    def crown(self, p) -> Array:
        return jnp.zeros(())


@dataclasses.dataclass(frozen=True)
class RollingTorus(_Wheel):
    """A torus (tyre) rolling without slipping on a plane: the crown circle of radius R
    (`radius`) about the wheel's `axis` (body frame), with a circular cross-section of radius
    ρ (`crown_radius`). d = −R u − ρ n, u = unit(n − (nᵀa) a):
    Φ = nᵀ(c − p₀) − R √(1 − (nᵀa)²) − ρ (1 row), ψ = tₖᵀ (ċ + ω × d) (2 rows)."""

    crown_radius: Spec = 0.0

    def crown(self, p) -> Array:
        return value(self.crown_radius, p)

    def check(self, params, layout, reference_q=None) -> None:
        """`_Wheel.check` and a negative crown radius."""
        if float(self._check_spec(self.crown_radius, "the crown radius", params)) < 0:
            raise ValueError(f"rolling joint {self.name!r}: the crown radius must be ≥ 0")
        super().check(params, layout, reference_q)


@dataclasses.dataclass(frozen=True)
class Contact:
    """The holonomic part of a rolling joint: Φ = nᵀ (P − p₀), the contact point's height
    above the plane (1 row; its multiplier λ gives the normal force −λ)."""

    name: str
    joint: _Rolling
    layout: Layout
    rows: ClassVar[int] = 1
    holonomic: ClassVar[bool] = True

    @property
    def body(self) -> int:
        return self.joint.body

    def __call__(self, t, q, p) -> Array:
        return jnp.atleast_1d(self.joint.clearance(self.layout.frames(q), p))

    def reaction(self, q, p, lam_contact, lam_no_slip) -> dict[str, Array]:
        """The joint's reaction from the multipliers of its two groups (`name` and
        `name + ".no_slip"`): the force on the body at the contact point P
        (`_Rolling.contact_force`: `normal_force`, `friction`, `force`) and P
        (`contact_point`), global axes. A point contact: no moment about P."""
        return {
            **self.joint.contact_force(p, lam_contact, lam_no_slip),
            "contact_point": self.joint.contact_point(self.layout, q, p),
        }


@dataclasses.dataclass(frozen=True)
class NoSlip:
    """The Pfaffian part of a rolling joint: the tangential velocity of the body's point at P,
    ψ = [t₁ᵀ v_P ; t₂ᵀ v_P] (2 rows; the friction force on the body is −λ₁ t₁ − λ₂ t₂)."""

    name: str
    joint: _Rolling
    layout: Layout
    rows: ClassVar[int] = 2
    holonomic: ClassVar[bool] = False

    @property
    def body(self) -> int:
        return self.joint.body

    def __call__(self, t, q, qd, p) -> Array:
        return self.joint.slip(self.layout, q, qd, p)


RollingJoint = RollingSphere | RollingDisc | RollingTorus


def contacts_of(mechanism: Mechanism) -> tuple[Contact, ...]:
    """The holonomic parts of the rolling joints a mechanism was built from (one per joint;
    its Pfaffian part is the group `name + ".no_slip"`)."""
    return tuple(j for j in mechanism.joints if isinstance(j, Contact))
