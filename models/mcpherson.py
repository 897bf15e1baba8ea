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
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.model.joints import spatial

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


def _centre(p, body: str):
    a, b = BODIES[body]
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
Y_LOCAL, Z_LOCAL = FRAME.T @ np.array([0.0, 1.0, 0.0]), FRAME.T @ np.array([0.0, 0.0, 1.0])


def _joints(redundant: bool) -> list:
    if redundant:
        arm_mount = [
            spatial.Spherical("A_a", ARM, _local("arm", "A_a"), None, _ground("A_a")),
            spatial.Spherical("A_b", ARM, _local("arm", "A_b"), None, _ground("A_b")),
        ]
    else:
        arm_mount = [
            spatial.Revolute(
                "A",
                ARM,
                _local("arm", "A"),
                _axis("A_a", "A_b", "arm"),
                None,
                _ground("A"),
                _axis("A_a", "A_b"),
            )
        ]
    joints = [
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
        spatial.Spherical("K", ROD, _local("piston_rod", "K"), None, _ground("K")),
        spatial.Spherical("I", STRUT, _local("strut", "I"), TIE_ROD, _local("tie_rod", "I")),
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


def loads() -> tuple[spatial.PointForce, ...]:
    """F_z on the arm's centre of mass and F_y(t) = F_y sin t on the rack's."""
    z, y = jnp.array([0.0, 0.0, 1.0]), jnp.array([0.0, 1.0, 0.0])
    return (
        spatial.PointForce("Fz", ARM, (0.0, 0.0, 0.0), lambda t, q, qd, p: p["Fz"] * z),
        spatial.PointForce(
            "Fy", RACK, (0.0, 0.0, 0.0), lambda t, q, qd, p: p["Fy"] * jnp.sin(t) * y
        ),
    )


def design_configuration(params: dict | None = None, orientation: str = spatial.ZXZ) -> np.ndarray:
    """q of the design position (it satisfies every constraint exactly), with the bodies'
    orientations in ZXZ angles or Euler parameters."""
    p = default_params() if params is None else params
    return np.concatenate([spatial.pose(_centre(p, b), FRAME, orientation) for b in BODIES])


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
        loads=loads(),
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
