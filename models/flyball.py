"""A flyball governor, after the IFToMM multibody benchmark's (spatial, Euler-parameter
bodies, stiff spring-dampers).

A vertical shaft turns freely about the global z axis (revolute to the ground at the
origin). Two arms hang from the shaft's top at height h = 1 m (revolutes about the shaft's
body-fixed axis normal to each arm's plane); each carries a 5 kg ball at its end, L = 0.6 m
from the pivot (an arm is one body: the ball's mass, centre of mass at the ball, J = 2/5 m r²
with r = 0.05 m). A slider (1 kg) moves along the shaft and turns with it (translational
joint). Each arm is coupled to the slider by a spring-damper from the arm's midpoint to a
point of the slider 0.1 m off the axis: K = 8·10⁵ N/m, C = 4·10⁴ N s/m, rest length 0.5 m.
Gravity along −z. The initial state: the arms 30° from the downward vertical, the springs
relaxed, everything turning at 2π rad/s.

The springs are nearly rigid links: their stiff mode (C/m ~ 10⁴ s⁻¹, K/C = 20 s⁻¹) bounds an
explicit method's step long after it has died out — a stiff mechanism (`diffrax.Kvaerno5`).
Shaft 2 kg, J = (0.05, 0.05, 0.01) kg m²; slider J = (0.01, 0.01, 0.02) kg m².
"""

from __future__ import annotations

import numpy as np

import jaxmbs
from jaxmbs.model.joints import forces, spatial

from ._cache import cached

DEFAULTS = {"K": 8e5, "C": 4e4, "rest": 0.5, "m_ball": 5.0, "g": 9.81}
HEIGHT, ARM, OFFSET, RADIUS = 1.0, 0.6, 0.1, 0.05
ANGLE = np.pi / 6  # initial arm angle from the downward vertical
SPIN = 2 * np.pi  # initial shaft speed, rad/s


def _arm_direction(side: float, angle: float) -> np.ndarray:
    """Unit vector from the pivot to the ball of the arm on side ±1 (shaft frame)."""
    return np.array([side * np.sin(angle), 0.0, -np.cos(angle)])


@cached
def flyball(**params: float) -> jaxmbs.Mechanism:
    """The flyball governor; keyword arguments override `DEFAULTS`."""
    p = {**DEFAULTS, **params}
    ball_inertia = lambda p: 0.4 * p["m_ball"] * RADIUS**2  # noqa: E731
    bodies = [
        spatial.Body("shaft", 2.0, (0.05, 0.05, 0.01)),
        spatial.Body("arm1", "m_ball", ball_inertia),
        spatial.Body("arm2", "m_ball", ball_inertia),
        spatial.Body("slider", 1.0, (0.01, 0.01, 0.02)),
    ]
    top = (0.0, 0.0, HEIGHT / 2)  # the shaft's centre of mass is at mid-height
    z, y = (0.0, 0.0, 1.0), (0.0, 1.0, 0.0)
    # Arm frames: local x along the arm, pivot at −L x (the ball is the centre of mass).
    pivot, middle = (-ARM, 0.0, 0.0), (-ARM / 2, 0.0, 0.0)
    joints = [
        spatial.Revolute("bearing", None, (0.0, 0.0, 0.0), z, 0, (0.0, 0.0, -HEIGHT / 2), z),
        spatial.Revolute("hinge1", 0, top, y, 1, pivot, y),
        spatial.Revolute("hinge2", 0, top, y, 2, pivot, y),
        spatial.Translational(
            "sleeve", 0, (0.0, 0.0, 0.0), z, (1.0, 0.0, 0.0), 3, (0.0, 0.0, 0.0), z, (1.0, 0.0, 0.0)
        ),
    ]
    elements = [
        forces.SpringDamper(
            f"spring{k}", stiffness="K", damping="C", free_length="rest", body_i=k, point_i=middle,
            body_j=3, point_j=(side * OFFSET, 0.0, 0.0),
        )
        for k, side in ((1, 1.0), (2, -1.0))
    ]  # fmt: skip
    mech = spatial.spatial_mechanism(
        bodies, joints, p, gravity=lambda p: (0.0, 0.0, -p["g"]), elements=elements
    )
    return mech.with_structure(_configuration(p, 0.0))


def _frames(p: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """(centre of mass, rotation matrix) of each body at shaft angle 0, arms at `ANGLE`."""
    pivot = np.array([0.0, 0.0, HEIGHT])
    out = [(np.array([0.0, 0.0, HEIGHT / 2]), np.eye(3))]
    for side in (1.0, -1.0):
        x = _arm_direction(side, ANGLE)
        y_axis = np.array([0.0, 1.0, 0.0])
        out.append((pivot + ARM * x, np.stack([x, y_axis, np.cross(x, y_axis)], axis=1)))
    # Slider height from the relaxed spring: |P_slider − P_arm middle| = rest.
    middle = pivot + ARM / 2 * _arm_direction(1.0, ANGLE)
    dx = middle[0] - OFFSET
    out.append((np.array([0.0, 0.0, middle[2] - np.sqrt(p["rest"] ** 2 - dx**2)]), np.eye(3)))
    return out


def _turned(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _configuration(p: dict, shaft_angle: float) -> np.ndarray:
    R = _turned(shaft_angle)
    return np.concatenate([spatial.pose(R @ r, R @ A) for r, A in _frames(p)])


def initial_state(mechanism: jaxmbs.Mechanism, spin: float = SPIN):
    """Consistent (q0, q̇0): the assembly above turning rigidly about z at `spin` rad/s (the
    rates of the Euler parameters by a central difference of the turning configuration,
    made exact by `jaxmbs.assemble` with the shaft's rate held)."""
    p = {k: float(v) for k, v in mechanism.params.items()}
    h = 1e-6
    q = _configuration(p, 0.0)
    qd = (_configuration(p, spin * h) - _configuration(p, -spin * h)) / (2 * h)
    return jaxmbs.assemble(mechanism, q, qd, fixed=("shaft.e3",))


def slider_height(q) -> np.ndarray:
    """The slider's height z along a trajectory q (T, n)."""
    return np.asarray(q)[..., 3 * 7 + 2]
