"""Planar 3-DOF platform manipulator (Attia 2005, §7): three RRR legs, two closed loops.

Masses and inertias are those of Table 1: every rod 1 kg with J_ξξ + J_ηη = 1/3 kg m², the
platform 3 kg with 1.0 kg m²; gravity along −y; a horizontal force F = 10 N at the platform
centre; start at rest. The paper's figure is missing, so the geometry is chosen here
(a symmetric 3-RRR):

- ground pivots A₁, A₂, A₃ on a circle of radius R_base = 2 m at 90°, 210°, 330°;
- every rod is a uniform 1 m rod, centre of mass at mid-length; Table 1's 1/3 is its moment
  about its first end (the origin of its body frame), so J_G = 1/3 − m (l/2)² = 1/12;
- the platform's joints C₁, C₂, C₃ lie on a circle of radius R_platform = 1/√2 m about its
  centre of mass (at 90°, 210°, 330° in its frame); its 1.0 kg m² is taken about that
  centre. With this radius the equivalent particles of the platform all have positive
  masses (1/3, 1, 1/3 at C₁, C₂, C₃ and 4/3 at the mid-point of C₁C₃). Beyond
  √(2/3) m the masses at C₁ and C₃ turn negative, and from about 0.97 m on the particle
  mass matrix is indefinite (a uniform triangular plate with Table 1's inertia, side 2 m,
  would be such a case);
- start: platform centre at the origin, angle 0; every elbow Bᵢ on the counter-clockwise
  side of its leg (the configuration is symmetric under a 120° turn).

Leg i is Aᵢ–Bᵢ–Cᵢ. The particles follow the paper's numbering 1 … 9 = A₁, B₁, C₁, C₂, C₃,
B₂, A₂, B₃, A₃ and its bodies 1 … 7 = A₁B₁, B₁C₁, platform, C₂B₂, B₂A₂, C₃B₃, B₃A₃ (rods
run from the platform towards the ground in legs 2 and 3). Three coordinate choices:

- `absolute()`: (x, y, φ) of the 7 bodies via `jaxmbs.model.joints.planar` — 21 coordinates,
  9 revolute joints, 18 constraints;
- `particles()`: equivalent particles (§2, §5) — 16 coordinates (particles 2 … 9;
  A₁ is a ground particle), 13 constraints: 9 rigidity rows (one per rod, three for the
  platform) and the pins of A₂ and A₃ to the ground (the cut joints r₇ − c₁ = 0,
  r₉ − c₂ = 0);
- `joint()`: the particle mechanism mapped to the relative joint angles
  θ = [θ₁, θ₂,₁, θ₃,₂, θ₄,₃, θ₅,₄, θ₆,₃, θ₇,₆] (§7) — 7 coordinates, the 4 rows of the cut
  joints at A₂ and A₃ (eqs 6.5–6.8), 3 degrees of freedom.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.model.joints import cos_sin, planar
from jaxmbs.model.joints import particles as pt

from ._cache import cached

DEFAULTS = {
    "l": 1.0,
    "m_rod": 1.0,
    "J_rod": 1.0 / 3.0,  # Table 1, about the rod's end
    "m_platform": 3.0,
    "J_platform": 1.0,  # Table 1, about the platform's centre of mass
    "R_base": 2.0,
    "R_platform": 1.0 / np.sqrt(2.0),
    "g": 9.81,
    "F": 10.0,
}

#: Directions of the ground pivots and of the platform joints (platform frame), leg 1 first.
ANGLES = np.deg2rad([90.0, 210.0, 330.0])
#: Moving particles in the paper's order 2 … 9 (A₁ = particle 1 is a ground particle).
PARTICLES = ("B1", "C1", "C2", "C3", "B2", "A2", "B3", "A3")
#: Rods as (name, first particle, second particle), paper bodies 1, 2, 4, 5, 6, 7.
RODS = (
    ("rod1", "A1", "B1"),
    ("rod2", "B1", "C1"),
    ("rod4", "C2", "B2"),
    ("rod5", "B2", "A2"),
    ("rod6", "C3", "B3"),
    ("rod7", "B3", "A3"),
)
#: Bodies in the paper's order 1 … 7 (the platform is body 3).
BODIES = ("rod1", "rod2", "platform", "rod4", "rod5", "rod6", "rod7")
JOINT_NAMES = ("theta1", "theta21", "theta32", "theta43", "theta54", "theta63", "theta76")


def _unit(angle):
    return jnp.stack(cos_sin(angle))


def ground_pivot(i: int):
    """Global position of the ground pivot Aᵢ (i = 0, 1, 2) as a function of the parameters."""
    return lambda p: p["R_base"] * _unit(jnp.asarray(ANGLES[i]))


def platform_joint(i: int):
    """Position of the platform joint Cᵢ in the platform frame (centre of mass at the origin)."""
    return lambda p: p["R_platform"] * _unit(jnp.asarray(ANGLES[i]))


def rod_centroidal_inertia(p):
    """J_G of a rod from Table 1's moment about its end: J_end − m (l/2)²."""
    return p["J_rod"] - p["m_rod"] * (p["l"] / 2) ** 2


# --- the three coordinate choices ---------------------------------------------------------


@cached
def absolute(**params: float) -> jaxmbs.Mechanism:
    """The manipulator in absolute coordinates (x, y, φ) of its 7 bodies (n = 21, m = 18)."""
    p = {**DEFAULTS, **params}
    bodies = [
        planar.Body("platform", "m_platform", "J_platform")
        if name == "platform"
        else planar.Body(name, "m_rod", rod_centroidal_inertia)
        for name in BODIES
    ]
    first, second = (lambda p: (-p["l"] / 2, 0.0)), (lambda p: (p["l"] / 2, 0.0))
    b = {name: i for i, name in enumerate(BODIES)}
    joints = [
        planar.Revolute("A1", b["rod1"], first, None, ground_pivot(0)),
        planar.Revolute("B1", b["rod1"], second, b["rod2"], first),
        planar.Revolute("C1", b["rod2"], second, b["platform"], platform_joint(0)),
        planar.Revolute("C2", b["platform"], platform_joint(1), b["rod4"], first),
        planar.Revolute("B2", b["rod4"], second, b["rod5"], first),
        planar.Revolute("A2", b["rod5"], second, None, ground_pivot(1)),
        planar.Revolute("C3", b["platform"], platform_joint(2), b["rod6"], first),
        planar.Revolute("B3", b["rod6"], second, b["rod7"], first),
        planar.Revolute("A3", b["rod7"], second, None, ground_pivot(2)),
    ]
    x_platform = 3 * b["platform"]

    def push(t, q, qd, p):
        return jnp.zeros_like(q).at[x_platform].set(p["F"])

    mech = planar.planar_mechanism(
        bodies, joints, p, gravity=lambda p: (0.0, -p["g"]), applied_forces=push
    )
    return mech.with_structure(_absolute_from_particles(home_particles(p), p))


def particle_system() -> pt.ParticleSystem:
    """The equivalent particle system: 6 rods (2 + mid-point) and the platform (3 + 1)."""
    rods = [pt.Rod(name, (i, j), "l", "m_rod", rod_centroidal_inertia) for name, i, j in RODS]
    platform = pt.PlanarBody(
        "platform",
        ("C1", "C2", "C3"),
        lambda p: jnp.stack([platform_joint(i)(p) for i in range(3)]),
        "m_platform",
        "J_platform",
    )
    bodies = [*rods[:2], platform, *rods[2:]]
    return pt.ParticleSystem(bodies, ground={"A1": ground_pivot(0)}, order=PARTICLES)


SYSTEM = particle_system()


@cached
def particles(**params: float) -> jaxmbs.Mechanism:
    """The manipulator in particle coordinates (n = 16, m = 13)."""
    p = {**DEFAULTS, **params}
    return SYSTEM.mechanism(
        p,
        joints=[pt.Pin("A2", "A2", ground_pivot(1)), pt.Pin("A3", "A3", ground_pivot(2))],
        gravity=lambda p: (0.0, -p["g"]),
        loads=[pt.PointForce("platform", (0.0, 0.0), lambda p: (p["F"], 0.0))],
        reference_q=np.asarray(particle_coordinates(home_particles(p))),
    )


@cached
def joint(**params: float) -> jaxmbs.Mechanism:
    """The manipulator in relative joint angles θ (n = 7), cut at A₂ and A₃ (m = 4)."""
    p = {**DEFAULTS, **params}
    return jaxmbs.map_coordinates(
        particles(**params),
        particle_map,
        home_joint_angles(p),
        keep=("A2", "A3"),
        coordinate_names=JOINT_NAMES,
    )


# --- kinematics ------------------------------------------------------------------------------


def chain_particles(theta, p) -> dict:
    """Forward kinematics of the open tree cut at A₂ and A₃ (the velocity transformation of
    §7 is its Jacobian): particle positions from the relative joint angles.

    Rod angles run from each rod's first particle to its second; the platform angle is that
    of its frame. θ₁ is rod 1's angle; θⱼ,ᵢ = φⱼ − φᵢ.
    """
    th1, th21, th32, th43, th54, th63, th76 = theta
    phi1 = th1
    phi2 = phi1 + th21
    phi3 = phi2 + th32
    phi4, phi6 = phi3 + th43, phi3 + th63
    phi5, phi7 = phi4 + th54, phi6 + th76
    l = p["l"]
    r = {"A1": ground_pivot(0)(p)}
    r["B1"] = r["A1"] + l * _unit(phi1)
    r["C1"] = r["B1"] + l * _unit(phi2)
    rot = planar.rotation(phi3)
    centre = r["C1"] - rot @ platform_joint(0)(p)
    r["C2"] = centre + rot @ platform_joint(1)(p)
    r["C3"] = centre + rot @ platform_joint(2)(p)
    r["B2"] = r["C2"] + l * _unit(phi4)
    r["A2"] = r["B2"] + l * _unit(phi5)
    r["B3"] = r["C3"] + l * _unit(phi6)
    r["A3"] = r["B3"] + l * _unit(phi7)
    return r


def particle_coordinates(positions: dict):
    """The particle coordinates q (particles 2 … 9) from a dict of positions."""
    return jnp.concatenate([jnp.asarray(positions[n]) for n in PARTICLES])


def particle_map(theta, p):
    """The map θ ↦ particle coordinates whose Jacobian is the velocity transformation."""
    return particle_coordinates(chain_particles(theta, p))


def home_particles(p) -> dict:
    """The start configuration: platform centred at the origin at angle 0, elbows on the
    counter-clockwise side of each leg (closed-form circle intersection)."""
    p = {k: float(v) for k, v in p.items()}
    r = {}
    for i in range(3):
        a = np.asarray(ground_pivot(i)(p))
        c = np.asarray(platform_joint(i)(p))
        d = np.linalg.norm(c - a)
        if not 0 < d < 2 * p["l"]:
            raise ValueError(f"leg {i + 1} cannot reach its platform joint (|AC| = {d:.3f})")
        u = (c - a) / d
        h = np.sqrt(p["l"] ** 2 - (d / 2) ** 2)
        r[f"A{i + 1}"] = a
        r[f"B{i + 1}"] = (a + c) / 2 + h * np.array([-u[1], u[0]])
        r[f"C{i + 1}"] = c
    return r


def _angle(a, b):
    d = np.asarray(b) - np.asarray(a)
    return float(np.arctan2(d[1], d[0]))


def home_joint_angles(p) -> np.ndarray:
    """θ at the start configuration."""
    r = home_particles(p)
    phi = {name: _angle(r[i], r[j]) for name, i, j in RODS}
    phi["platform"] = 0.0
    return np.array(
        [
            phi["rod1"],
            phi["rod2"] - phi["rod1"],
            phi["platform"] - phi["rod2"],
            phi["rod4"] - phi["platform"],
            phi["rod5"] - phi["rod4"],
            phi["rod6"] - phi["platform"],
            phi["rod7"] - phi["rod6"],
        ]
    )


def _absolute_from_particles(r: dict, p, platform_angle: float = 0.0) -> np.ndarray:
    """(x, y, φ) of the 7 bodies from particle positions (a configuration, not a map)."""
    q = []
    for name in BODIES:
        if name == "platform":
            centre = np.mean([r["C1"], r["C2"], r["C3"]], axis=0)
            q += [*centre, platform_angle]
        else:
            _, i, j = next(rod for rod in RODS if rod[0] == name)
            q += [*(np.asarray(r[i]) + np.asarray(r[j])) / 2, _angle(r[i], r[j])]
    return np.asarray(q, dtype=float)


def chain_absolute(theta, p):
    """Absolute coordinates (x, y, φ) of the 7 bodies from θ (a second map, used to check
    that `map_coordinates` is generic)."""
    r = chain_particles(theta, p)
    th1, th21, th32, th43, th54, th63, th76 = theta
    phi = {"rod1": th1, "rod2": th1 + th21}
    phi["platform"] = phi["rod2"] + th32
    phi["rod4"] = phi["platform"] + th43
    phi["rod5"] = phi["rod4"] + th54
    phi["rod6"] = phi["platform"] + th63
    phi["rod7"] = phi["rod6"] + th76
    q = []
    for name in BODIES:
        if name == "platform":
            centre = r["C1"] - planar.rotation(phi["platform"]) @ platform_joint(0)(p)
            q.append(jnp.stack([*centre, phi[name]]))
        else:
            _, i, j = next(rod for rod in RODS if rod[0] == name)
            q.append(jnp.stack([*((r[i] + r[j]) / 2), phi[name]]))
    return jnp.concatenate(q)


# --- states and outputs -----------------------------------------------------------------------


def initial_state(mechanism: jaxmbs.Mechanism):
    """At rest in the start configuration, in the mechanism's coordinates (21, 16 or 7)."""
    p = mechanism.params
    r = home_particles(p)
    if mechanism.n == 21:
        q = _absolute_from_particles(r, p)
    elif mechanism.n == 16:
        q = np.asarray(particle_coordinates(r))
    elif mechanism.n == 7:
        q = home_joint_angles(p)
    else:
        raise ValueError(f"not a platform manipulator: n = {mechanism.n}")
    return jaxmbs.assemble(mechanism, q, np.zeros(mechanism.n))


def platform_pose(mechanism: jaxmbs.Mechanism, q, params=None):
    """(x, y, φ) of the platform's centre of mass for coordinates q (shape (n,) or (T, n))."""
    p = mechanism.params if params is None else params
    q = jnp.asarray(q)
    if q.ndim == 2:
        return jax.vmap(lambda q_: platform_pose(mechanism, q_, p))(q)
    if mechanism.n == 21:
        return q[6:9]
    if mechanism.n == 16:
        return _pose_from_particles(q, p)
    if mechanism.n == 7:
        return _pose_from_particles(particle_map(q, p), p)
    raise ValueError(f"not a platform manipulator: n = {mechanism.n}")


def _pose_from_particles(q, p):
    centre = SYSTEM.center_of_mass(q, "platform", p)
    c1, c3 = SYSTEM.particle(q, "C1", p), SYSTEM.particle(q, "C3", p)
    d, d0 = c3 - c1, platform_joint(2)(p) - platform_joint(0)(p)
    angle = jnp.arctan2(d[1], d[0]) - jnp.arctan2(d0[1], d0[0])
    return jnp.stack([*centre, jnp.arctan2(jnp.sin(angle), jnp.cos(angle))])
