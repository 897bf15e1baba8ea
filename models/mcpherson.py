"""McPherson strut front suspensions, simplified and with redundant constraints.

The two struts compared by Pękal–Frączek 2016 (§4.1, Fig. 1a/1b, Table 1), in the spirit of
Haug's (1989) McPherson strut: 5 spatial bodies in absolute coordinates (centre of mass and
ZXZ Euler angles as in the paper, n = 30; or Euler parameters, `orientation=
"euler_parameters"`, n = 35 with the 5 normalisations as one more constraint group), 4 degrees
of freedom, two of them local mobilities (the spins of
the piston rod and of the tie rod about their own axes). The paper's figures are missing; the
geometry below is designed to honour its Table 1 and text.

Axes: x forward, y lateral (outboard), z up; the chassis is ground. Bodies (paper numbering):

1. lower control arm A–B (`arm`): revolute joint to the chassis at A, its axis along x
   through the bushings A_a, A_b (|AA_a| = |AA_b| = 0.025 m); ball joint B outboard
   (|AB| = 0.3 m, horizontal in the design position).
2. strut tube with the wheel knuckle (`strut`): strut axis C–D (|CD| = 0.45 m) tilted inward
   by 10° (kingpin inclination) and rearward by 5° (caster); C is 0.05 m above the ball
   joint B (|BC|); the spindle leaves the axis at E (|CE| = 0.1 m) and ends at the wheel
   centre H (|EH| = 0.15 m, outboard); the steering arm leaves the axis at F (|CF| = 0.25 m)
   rearward to G (|FG| = 0.1 m) and the tie-rod ball joint I (|GI| = 0.05 m, inboard of G).
3. piston rod J–K (`piston_rod`, |JK| = 0.3 m): a cylindrical joint on the strut axis (it
   slides and turns in the tube) and a spherical top mount K on the chassis, 0.15 m above
   the tube's upper end D.
4. tie rod I–L (`tie_rod`, |IL| = 0.5 m): ball joints at I (knuckle) and L (rack); it lies
   along −y in the design position.
5. steering rack L–N (`rack`, |LN| = 0.2 m): a translational joint to the chassis along y.

Joints of the simplified strut: revolute A (5 rows), spherical B (3), cylindrical strut–rod
(4), spherical K (3), spherical I (3), spherical L (3), translational rack (5): m = 26,
rank 26, dof = 30 − 26 = 4 (wheel travel, rack travel, two spins).

The redundant strut differs only by redundant constraints, as real hardware is built: the
arm is held by two ball-jointed bushings A_a and A_b instead of the ideal revolute (6 rows
spanning the revolute's 5), and the piston rod is guided a second time, at the tube's upper
end D, by a point-on-line joint (2 rows implied by the cylindrical joint). m = 29, rank 26:
redundancy 3, the same dof and the same motion.

Masses 1 kg and centroidal inertias 0.1 kg m² (all principal moments) for every body, centres
of mass at the middle of |AB|, |CD|, |JK|, |IL|, |LN|; F_z = 40 N upward at the arm's centre
of mass, F_y = 0.1 sin t N along y on the rack, gravity −9.80665 m/s² along z.

Every body frame has the design orientation A₀ (local x, y, z along global y, z, x), i.e.
Euler angles (π/2, π/2, 0): each frame's z axis is horizontal, so the wheel travel (rotation
about x) and the steering (rotation about a near-vertical axis) keep θ near π/2, far from the
gimbal lock. The hardpoints of the design position are parameters (`params["hardpoints"]`):
local coordinates are derived from them, so gradients reach the geometry as well as the
masses. `experiments/mcpherson_geometry.py` draws both struts in 3-D.

**The quarter car** (`quarter_car`, issue 26) puts the simplified strut under a quarter of a
car body: the chassis becomes a body (5: the sprung mass m₅) on a vertical translational
joint to the ground (`heave`), carrying the arm's revolute A, the top mount K and the tie rod's
inner joint L; the steering rack is locked (L on the chassis) and K and L are universal joints
(cross axes x and x × link), which hold the piston rod's and the tie rod's spins — the two
local mobilities, which would leave the static equilibrium singular. n = 30, m = 28, dof = 2:
body heave and wheel travel. Forces:

- the coil-over along the strut axis, between D on the strut tube and K on the chassis: a
  linear spring-damper f = k (|DK| − δ₀) + c d|DK|/dt (`k_spring`, `c_damper`), with the
  free length δ₀ = |DK|_design + F₀/k set by the spring seat so that the spring pushes with the
  preload F₀ at the design length (`preload`; the ride height does not move with k);
- the tyre at the wheel centre H, vertical: F_t = k_t s(δ_t) + c_t δ̇_t σ(δ_t) (`one_sided`:
  smooth, and zero once the tyre lifts off), with the compression δ_t = z_road(v t) + h₀ − z_H
  over a road `jaxmbs.Profile` passed at `speed` (the contact patch's offset below H and the
  tyre's lateral and longitudinal forces are left out: the heave slider carries them);
- gravity, and an optional `payload` (N, downward) on the chassis.

The masses lump the knuckle, hub, brake and wheel into the strut body (at the middle of CD,
the strut's convention). Linearised at the static point (`static_configuration`), the model
has the two modes of the textbook quarter car, m_s z̈_s = −k_w (z_s − z_u) and
m_u z̈_u = k_w (z_s − z_u) − k_t (z_u − z_road), where k_w = d²V/dz² is the wheel rate (the
spring and gravity potential along the wheel travel z with the chassis held: k·MR², MR the
motion ratio d|DK|/dz, plus the preload's geometric term F₀ d²|DK|/dz²) and m_s, m_u the
kinetic energy's diagonal in (z_s, z_u) (`tests/test_quarter_car.py`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs._internal.compile import quick_jit
from jaxmbs.model.joints import forces, spatial

from ._cache import cached

#: Table 1 of Pękal–Frączek 2016 (m).
TABLE_1 = {
    "AB": 0.3,
    "AA_a": 0.025,
    "AA_b": 0.025,
    "CD": 0.45,
    "CE": 0.1,
    "CF": 0.25,
    "BC": 0.05,
    "FG": 0.1,
    "EH": 0.15,
    "GI": 0.05,
    "JK": 0.3,
    "IL": 0.5,
    "LN": 0.2,
}

#: Body names (paper bodies 1–5) and the hardpoints whose midpoint is the centre of mass.
BODIES = {
    "arm": ("A", "B"),
    "strut": ("C", "D"),
    "piston_rod": ("J", "K"),
    "tie_rod": ("I", "L"),
    "rack": ("L", "N"),
}

#: Design orientation of every body frame: local x, y, z along global y, z, x.
FRAME = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])

KINGPIN_INCLINATION = np.deg2rad(10.0)
CASTER = np.deg2rad(5.0)
ROD_ABOVE_TUBE = 0.15  # |DK|: the top mount above the tube's upper end


def design_hardpoints() -> dict[str, np.ndarray]:
    """Hardpoints of the design position (global, m), built from Table 1."""
    d = TABLE_1
    x, y, z = np.eye(3)
    axis = np.array([-np.tan(CASTER), -np.tan(KINGPIN_INCLINATION), 1.0])
    axis /= np.linalg.norm(axis)
    A = np.zeros(3)
    B = A + d["AB"] * y
    C = B + d["BC"] * z
    D = C + d["CD"] * axis
    E = C + d["CE"] * axis
    F = C + d["CF"] * axis
    G = F - d["FG"] * x
    I = G - d["GI"] * y  # noqa: E741 (the paper's point I)
    K = D + ROD_ABOVE_TUBE * axis
    J = K - d["JK"] * axis
    L = I - d["IL"] * y
    return {
        "A": A,
        "A_a": A - d["AA_a"] * x,
        "A_b": A + d["AA_b"] * x,
        "B": B,
        "C": C,
        "D": D,
        "E": E,
        "F": F,
        "G": G,
        "H": E + d["EH"] * y,
        "I": I,
        "J": J,
        "K": K,
        "L": L,
        "N": L - d["LN"] * y,
    }


DEFAULTS = {
    **{f"m{i}": 1.0 for i in range(1, 6)},
    **{f"J{i}": 0.1 for i in range(1, 6)},
    "Fz": 40.0,
    "Fy": 0.1,
    "g": 9.80665,
}


def default_params() -> dict:
    """Masses, inertias, loads, gravity and the design hardpoints."""
    return {**DEFAULTS, "hardpoints": design_hardpoints()}


#: The quarter car's chassis frame sits midway between the arm's pivot A and the top mount K.
_ENDS = {**BODIES, "chassis": ("A", "K")}


def _centre(p, body: str):
    a, b = _ENDS[body]
    return (p["hardpoints"][a] + p["hardpoints"][b]) / 2


def _to_frame(v):
    """Global components → body-frame components (FRAME is the design orientation)."""
    return spatial.matvec(FRAME.T, v)


def _local(body: str, name: str):
    """Local coordinates on `body` of the hardpoint `name` (a callable of the parameters)."""
    return lambda p: _to_frame(p["hardpoints"][name] - _centre(p, body))


def _axis(a: str, b: str, body: str | None = None):
    """Unit vector from hardpoint a to b, global (body None) or in the body frame."""

    def direction(p):
        v = p["hardpoints"][b] - p["hardpoints"][a]
        v = v / jnp.linalg.norm(v)
        return v if body is None else _to_frame(v)

    return direction


def _ground(name: str):
    return lambda p: p["hardpoints"][name]


ARM, STRUT, ROD, TIE_ROD, RACK = range(5)
X_LOCAL, Y_LOCAL, Z_LOCAL = FRAME  # the global axes in the body frames of the design position


def _cross_axis(a: str, b: str, body: str):
    """Unit x × (b − a) in the frame of `body`: a universal joint's cross axis on a link
    from a to b, perpendicular to the link and to the chassis cross axis x."""

    def direction(p):
        v = jnp.cross(jnp.array([1.0, 0.0, 0.0]), p["hardpoints"][b] - p["hardpoints"][a])
        return _to_frame(v / jnp.linalg.norm(v))

    return direction


def _chassis_links(chassis: int) -> list:
    """The quarter car's top mount K and inner tie-rod joint L: universal joints to the chassis
    (cross axes x on the chassis, x × link on the link), which hold the piston rod's and the
    tie rod's spins about their own axes — the strut's two local mobilities."""
    return [
        spatial.Universal(
            name,
            body,
            _local(link, name),
            _cross_axis(a, b, link),
            chassis,
            _local("chassis", name),
            X_LOCAL,
        )
        for name, body, link, a, b in (
            ("K", ROD, "piston_rod", "J", "K"),
            ("L", TIE_ROD, "tie_rod", "I", "L"),
        )
    ]


def _joints(redundant: bool, chassis: int | None = None) -> list:
    """The strut's joints, mounted on the ground (`chassis` None: with the steering rack) or
    on the chassis body `chassis` (the quarter car: the rack locked, `_chassis_links`)."""
    if redundant:
        arm_mount = [
            spatial.Spherical("A_a", ARM, _local("arm", "A_a"), None, _ground("A_a")),
            spatial.Spherical("A_b", ARM, _local("arm", "A_b"), None, _ground("A_b")),
        ]
    else:
        arm_body, arm_point = (
            (None, _ground("A")) if chassis is None else (chassis, _local("chassis", "A"))
        )
        arm_mount = [
            spatial.Revolute(
                "A",
                ARM,
                _local("arm", "A"),
                _axis("A_a", "A_b", "arm"),
                arm_body,
                arm_point,
                _axis("A_a", "A_b", None if chassis is None else "chassis"),
            )
        ]
    strut = [
        *arm_mount,
        spatial.Spherical("B", ARM, _local("arm", "B"), STRUT, _local("strut", "B")),
        spatial.Cylindrical(
            "strut-rod",
            STRUT,
            _local("strut", "C"),
            _axis("C", "D", "strut"),
            ROD,
            _local("piston_rod", "J"),
            _axis("J", "K", "piston_rod"),
        ),
    ]
    tie_rod = spatial.Spherical("I", STRUT, _local("strut", "I"), TIE_ROD, _local("tie_rod", "I"))
    if chassis is not None:
        return [*strut, tie_rod, *_chassis_links(chassis)]
    joints = [
        *strut,
        spatial.Spherical("K", ROD, _local("piston_rod", "K"), None, _ground("K")),
        tie_rod,
        spatial.Spherical("L", TIE_ROD, _local("tie_rod", "L"), RACK, _local("rack", "L")),
        spatial.Translational(
            "rack",
            None,
            _ground("L"),
            (0.0, 1.0, 0.0),
            (0.0, 0.0, 1.0),
            RACK,
            _local("rack", "L"),
            Y_LOCAL,
            Z_LOCAL,
        ),
    ]
    if redundant:
        joints.append(
            spatial.PointOnLine(
                "guide",
                STRUT,
                _local("strut", "C"),
                _axis("C", "D", "strut"),
                ROD,
                _local("piston_rod", "D"),
            )
        )
    return joints


def loads() -> tuple[forces.PointForce, ...]:
    """F_z on the arm's centre of mass and F_y(t) = F_y sin t on the rack's."""
    z, y = jnp.array([0.0, 0.0, 1.0]), jnp.array([0.0, 1.0, 0.0])
    centre = (0.0, 0.0, 0.0)
    return (
        forces.PointForce("Fz", ARM, lambda t, q, qd, p: p["Fz"] * z, point=centre),
        forces.PointForce("Fy", RACK, lambda t, q, qd, p: p["Fy"] * jnp.sin(t) * y, point=centre),
    )


def design_configuration(
    params: dict | None = None, orientation: str = spatial.ZXZ, bodies=tuple(BODIES)
) -> np.ndarray:
    """q of the design position (it satisfies every constraint exactly), with the bodies'
    orientations in ZXZ angles or Euler parameters; `bodies`: the model's body names."""
    p = default_params() if params is None else params
    return np.concatenate([spatial.pose(_centre(p, b), FRAME, orientation) for b in bodies])


@cached
def mcpherson(
    redundant: bool = False, orientation: str = spatial.ZXZ, **params
) -> jaxmbs.Mechanism:
    """A McPherson strut; keyword arguments override `DEFAULTS` (and `hardpoints`).
    `orientation`: the bodies' orientation coordinates, `"zxz"` (the paper's) or
    `"euler_parameters"`."""
    p = {**default_params(), **params}
    bodies = [
        spatial.Body(name, f"m{i + 1}", f"J{i + 1}", orientation) for i, name in enumerate(BODIES)
    ]
    return spatial.spatial_mechanism(
        bodies,
        _joints(redundant),
        p,
        gravity=lambda p: (0.0, 0.0, -p["g"]),
        elements=loads(),
        reference_q=design_configuration(p, orientation),
    )


def mcpherson_simplified(orientation: str = spatial.ZXZ, **params) -> jaxmbs.Mechanism:
    """The strut without redundant constraints (Pękal–Frączek 2016, Fig. 1a)."""
    return mcpherson(False, orientation, **params)


def mcpherson_redundant(orientation: str = spatial.ZXZ, **params) -> jaxmbs.Mechanism:
    """The overconstrained strut (Fig. 1b): redundancy 3, the same motion."""
    return mcpherson(True, orientation, **params)


def wheel_centre(mechanism: jaxmbs.Mechanism, q, params=None):
    """Global position of the wheel centre H (on the strut body), either orientation kind."""
    p = mechanism.params if params is None else params
    frames = spatial.Layout.from_mechanism(mechanism).frames(q)
    return frames.point(STRUT, _local("strut", "H")(p))


def initial_state(mechanism: jaxmbs.Mechanism, arm_angle: float = 0.0, rack_offset: float = 0.0):
    """Consistent (q0, q̇0 = 0) by `jaxmbs.assemble` from a guess: the design position with
    the arm turned by `arm_angle` (rad, upward positive) about its axis and the rack shifted
    by `rack_offset` (m) along y. The arm's centre height and the rack position are kept."""
    hardpoints = {k: np.asarray(v) for k, v in mechanism.params["hardpoints"].items()}
    layout = spatial.Layout.from_mechanism(mechanism)
    orientation = layout.orientations[ARM]
    q = design_configuration({"hardpoints": hardpoints}, orientation)
    c, s = np.cos(arm_angle), np.sin(arm_angle)
    turn = np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])
    arm, rack = layout.coordinates(ARM), layout.coordinates(RACK)
    centre = hardpoints["A"] + turn @ (q[arm][:3] - hardpoints["A"])
    q[arm] = spatial.pose(centre, turn @ FRAME, orientation)
    q[rack.start + 1] += rack_offset
    names = mechanism.coordinate_names
    fixed = (names[arm.start + 2], names[rack.start + 1])
    return jaxmbs.assemble(mechanism, q, np.zeros(mechanism.n), fixed=fixed)


# The quarter car (issue 26) -------------------------------------------------------------------

#: The quarter car's bodies: the strut's arm, strut, piston rod and tie rod, then the chassis
#: (the sprung mass) in the place of the rack.
QUARTER_CAR_BODIES = ("arm", "strut", "piston_rod", "tie_rod", "chassis")
CHASSIS = 4

QUARTER_CAR_DEFAULTS = {
    "m1": 4.0,  # lower arm
    "m2": 35.0,  # strut tube, knuckle, hub, brake and wheel
    "m3": 2.0,  # piston rod
    "m4": 1.0,  # tie rod
    "m5": 350.0,  # sprung mass: a quarter of the car body
    "J1": 0.05,
    "J2": 1.0,
    "J3": 0.02,
    "J4": 0.02,
    "J5": 50.0,
    "k_spring": 30e3,  # coil spring (N/m, along the strut)
    "c_damper": 2000.0,  # damper (N s/m, along the strut)
    "k_tyre": 200e3,  # tyre vertical stiffness (N/m)
    "c_tyre": 200.0,  # tyre vertical damping (N s/m)
    "tyre_sharpness": 1e-4,  # ε of the smooth lift-off (m)
    "speed": 12.0,  # forward speed over the road (m/s)
    "payload": 0.0,  # an extra vertical load on the chassis (N, downward)
    "g": 9.80665,
}


def _quarter_car_bodies(orientation: str) -> list[spatial.Body]:
    return [
        spatial.Body(name, f"m{i + 1}", f"J{i + 1}", orientation)
        for i, name in enumerate(QUARTER_CAR_BODIES)
    ]


def _coil_over_free_length(p):
    """δ₀ = |DK| + F₀/k: the spring seat set so that the spring pushes with the preload F₀ at
    the design length |DK|, whatever its rate k (the ride height does not move with k)."""
    hp = p["hardpoints"]
    return jnp.linalg.norm(hp["K"] - hp["D"]) + p["preload"] / p["k_spring"]


def wheel_height(orientation: str, q, p):
    """z_H, the wheel centre's height (the strut body's point H)."""
    frames = spatial.Layout.from_bodies(_quarter_car_bodies(orientation)).frames(q)
    return frames.point(STRUT, _local("strut", "H")(p))[2]


def tyre_deflection(road: jaxmbs.Profile, orientation: str, t, q, p):
    """δ_t = z_road(v t) + h₀ − z_H, the tyre's compression (h₀ = `tyre_free_height`: the
    wheel centre's height above the road when the tyre just touches)."""
    return road.along("speed")(t, p) + p["tyre_free_height"] - wheel_height(orientation, q, p)


def tyre_load(road: jaxmbs.Profile, orientation: str, t, q, qd, p):
    """The vertical tyre force F_t = k_t s(δ_t) + c_t δ̇_t σ(δ_t) (`one_sided`: zero once the
    tyre leaves the road, smooth through lift-off), with δ̇_t = ∂δ_t/∂t + (∂δ_t/∂q) q̇."""
    t = jnp.asarray(t, q.dtype)
    delta, delta_dot = jax.jvp(
        lambda t_, q_: tyre_deflection(road, orientation, t_, q_, p),
        (t, q),
        (jnp.ones_like(t), qd),
    )
    return forces.one_sided("k_tyre", 0.0, "c_tyre", "tyre_sharpness")(delta, delta_dot, p)


def _tyre_force(road: jaxmbs.Profile, orientation: str):
    """Q_t = −(∂δ_t/∂q)ᵀ F_t: F_t pushes the wheel centre up (a vjp of δ_t)."""

    def applied(t, q, qd, p):
        _, pullback = jax.vjp(lambda q_: tyre_deflection(road, orientation, t, q_, p), q)
        return -pullback(tyre_load(road, orientation, t, q, qd, p))[0]

    return applied


FLAT_ROAD = jaxmbs.Profile(np.linspace(-1.0, 1.0, 5), np.zeros(5))


@cached
def _quarter_car(road: jaxmbs.Profile, orientation: str, **params) -> jaxmbs.Mechanism:
    p = {**QUARTER_CAR_DEFAULTS, "hardpoints": design_hardpoints(), **params}
    heave = spatial.Translational(
        "heave",
        None,
        _ground("A"),
        (0.0, 0.0, 1.0),
        (1.0, 0.0, 0.0),
        CHASSIS,
        _local("chassis", "A"),
        Z_LOCAL,
        X_LOCAL,
    )
    coil_over = forces.SpringDamper(
        "coil-over",
        stiffness="k_spring",
        damping="c_damper",
        body_i=STRUT,
        point_i=_local("strut", "D"),
        body_j=CHASSIS,
        point_j=_local("chassis", "K"),
        free_length=_coil_over_free_length,
    )
    down = jnp.array([0.0, 0.0, -1.0])
    payload = forces.PointForce(
        "payload", CHASSIS, lambda t, q, qd, p: p["payload"] * down, point=(0.0, 0.0, 0.0)
    )
    return spatial.spatial_mechanism(
        _quarter_car_bodies(orientation),
        [*_joints(False, CHASSIS), heave],
        p,
        gravity=lambda p: (0.0, 0.0, -p["g"]),
        elements=[coil_over, payload],
        applied_forces=_tyre_force(road, orientation),
        reference_q=design_configuration(p, orientation, QUARTER_CAR_BODIES),
    )


@quick_jit
def _unbalanced(mechanism: jaxmbs.Mechanism, q, p):
    """Q − Cᵀλ at rest with λ by least squares: the part of the applied forces that the
    joints cannot hold (zero at a static equilibrium). One compiled program for the build's
    two evaluations (the preload an array in both), not op by op."""
    C = jaxmbs.constraint_jacobian(mechanism, q, 0.0, p)
    Q = mechanism.forces(0.0, q, jnp.zeros_like(q), p)
    return Q - C.T @ jnp.linalg.lstsq(C.T, Q)[0]


def quarter_car(
    road: jaxmbs.Profile = FLAT_ROAD, orientation: str = spatial.ZXZ, **params
) -> jaxmbs.Mechanism:
    """The McPherson quarter car over `road` (z_road(x) sampled, passed at `speed`);
    keyword arguments override `QUARTER_CAR_DEFAULTS` (and `hardpoints`).

    Unless given, the tyre's free height h₀ and the spring preload F₀ are set so that the
    design position is the static point: h₀ = z_H − z_road(0) + W/k_t with W = g Σ mᵢ +
    payload (the tyre carries the whole weight: the heave slider holds no vertical force), and
    F₀ the root of the unbalanced force Q − Cᵀλ (linear in F₀; least squares over the rest
    directions, which the wheel-travel direction alone does not satisfy to zero only by the
    tyre's smooth ramp, ~1e-6 relative). `jaxmbs.equilibrium` then finds the exact point.
    """
    p = {**QUARTER_CAR_DEFAULTS, "hardpoints": design_hardpoints(), **params}
    q = jnp.asarray(design_configuration(p, orientation, QUARTER_CAR_BODIES))
    if "tyre_free_height" not in params:
        weight = p["g"] * sum(p[f"m{i}"] for i in range(1, 6)) + p["payload"]
        road_height = road.along("speed")(0.0, p)
        h = wheel_height(orientation, q, p) - road_height + weight / p["k_tyre"]
        p["tyre_free_height"] = float(h)
    p.setdefault("preload", 0.0)
    mech = _quarter_car(road, orientation, **{**params, **p})
    if "preload" not in params:
        r0 = _unbalanced(mech, q, {**p, "preload": jnp.asarray(0.0)})
        r1 = _unbalanced(mech, q, {**p, "preload": jnp.asarray(1.0)}) - r0
        p["preload"] = float(-jnp.dot(r0, r1) / jnp.dot(r1, r1))
        mech = mech.replace_params(p)
    return mech


def static_configuration(mechanism: jaxmbs.Mechanism, params=None):
    """The quarter car's static point for `params` (default the mechanism's):
    `jaxmbs.equilibrium` from the design position of the mechanism's own hard points
    (differentiable in `params` by the implicit function theorem; jittable). Newton's
    tolerance is 1e-10: at 1e-12 its step test can stall at round-off (measured: 1.9e-12 left
    with z_B moved by 20 µm); it converges quadratically, so the point is at round-off."""
    orientation = spatial.Layout.from_mechanism(mechanism).orientations[CHASSIS]
    q = design_configuration(mechanism.params, orientation, QUARTER_CAR_BODIES)
    return jaxmbs.equilibrium(mechanism, q, 0.0, params, tol=1e-10)


def travel_configuration(mechanism: jaxmbs.Mechanism, q, travel, params=None, steps: int = 8):
    """The quarter car's configuration with the chassis held as in q and the wheel centre
    moved up by `travel` (m) relative to q: Newton on the 23 linkage rows of Φ and
    z_H − z_H(q) − travel = 0 in the 24 linkage coordinates (`steps` iterations from q, no
    branching: jittable, differentiable; converged to round-off within a few centimetres)."""
    p = mechanism.params if params is None else params
    layout = spatial.Layout.from_mechanism(mechanism)
    orientation = layout.orientations[CHASSIS]
    chassis = layout.coordinates(CHASSIS)
    rows = np.setdiff1d(np.arange(mechanism.n_holonomic), mechanism.group_rows("heave"))
    target = wheel_height(orientation, q, p) + travel

    def residual(linkage):
        q_ = q.at[: chassis.start].set(linkage)
        phi = jaxmbs.position_residual(mechanism, q_, 0.0, p)[rows]
        return jnp.append(phi, wheel_height(orientation, q_, p) - target)

    def newton(linkage, _):
        J = jax.jacfwd(residual)(linkage)
        return linkage - jnp.linalg.solve(J, residual(linkage)), None

    linkage, _ = jax.lax.scan(newton, q[: chassis.start], None, length=steps)
    return q.at[: chassis.start].set(linkage)


def camber_toe(mechanism: jaxmbs.Mechanism, q, params=None):
    """(camber, toe-in) in rad from the spindle direction s = (H − E)/|H − E| of the strut
    body: camber γ = atan2(−s_z, s_y) (the wheel's top leaning outboard, +y, positive),
    toe-in atan2(s_x, s_y) (the wheel's front turned inboard positive). Both zero in the
    design position, where s = +y."""
    p = mechanism.params if params is None else params
    frames = spatial.Layout.from_mechanism(mechanism).frames(q)
    s = frames.vector(STRUT, _to_frame(p["hardpoints"]["H"] - p["hardpoints"]["E"]))
    return jnp.arctan2(-s[2], s[1]), jnp.arctan2(s[0], s[1])


def textbook_parameters(
    mechanism: jaxmbs.Mechanism, road: jaxmbs.Profile, q, params=None, h: float = 1e-3
) -> dict[str, float]:
    """The 2-DOF textbook quarter car of the model at the static point q.

    With the chassis held, the wheel travel z (the wheel centre's height relative to the
    chassis) parametrises the linkage, q = q(z) (`travel_configuration`). Then

    - the motion ratio MR = d|DK|/dz and the wheel rate k_w = d²V/dz² (V: gravity and spring
      potential; k_w = k MR² + the preload's geometric term) by 5-point central differences
      with step h along q(z);
    - the masses from the kinetic energy in (z_s, z_u), q̇ = (h_z − v) ż_s + v ż_u, where
      h_z moves every body up and v = dq/dz (forward mode): M₂ = Tᵀ M T, whose diagonal
      gives m_s, m_u and whose off-diagonal `coupling` the textbook model leaves out (the arm,
      rod and tie rod move partly with the chassis, partly with the wheel);
    - the tyre rate k_t σ(δ_t) (`one_sided`'s slope at the static deflection).

    **Returns:** `{"m_s", "m_u", "coupling", "k_w", "motion_ratio", "k_tyre"}`.
    """
    p = mechanism.params if params is None else params
    q = jnp.asarray(q)
    orientation = spatial.Layout.from_mechanism(mechanism).orientations[CHASSIS]
    coil_over = mechanism.elements.elements[0]
    steps = h * np.arange(-2, 3)
    curve = [travel_configuration(mechanism, q, dz, p) for dz in steps]
    V = np.array([float(mechanism.potential_energy(q_, p)) for q_ in curve])
    L = np.array([float(coil_over.deformation(mechanism.elements.kit, q_, p)) for q_ in curve])
    first = np.array([1.0, -8.0, 0.0, 8.0, -1.0]) / (12 * h)
    second = np.array([-1.0, 16.0, -30.0, 16.0, -1.0]) / (12 * h * h)
    v = jax.jacfwd(lambda dz: travel_configuration(mechanism, q, dz, p))(0.0)
    layout = spatial.Layout.from_mechanism(mechanism)
    heights = [layout.coordinates(b).start + 2 for b in range(len(QUARTER_CAR_BODIES))]
    up = jnp.zeros(mechanism.n).at[np.array(heights)].set(1.0)  # every body's centre up
    T = jnp.stack([up - v, v], axis=1)
    M2 = T.T @ mechanism.mass_matrix(q, p) @ T
    law = forces.one_sided(p["k_tyre"], 0.0, 0.0, p["tyre_sharpness"])
    slope = jax.grad(law)(tyre_deflection(road, orientation, 0.0, q, p), 0.0, p)
    return {
        "m_s": float(M2[0, 0]),
        "m_u": float(M2[1, 1]),
        "coupling": float(M2[0, 1]),
        "k_w": float(second @ V),
        "motion_ratio": float(first @ L),
        "k_tyre": float(slope),
    }
