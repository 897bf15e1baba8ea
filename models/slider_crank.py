"""Planar slider-crank in absolute coordinates (n = 9).

Crank O–A (r = 0.15 m, 1 kg) pinned to ground at the origin, connecting rod A–B
(L = 0.5 m, 1.5 kg), slider (0.8 kg, J = 1e-3 kg m²) pinned to the rod at B and sliding
along the ground x axis. Links lie along their local x axes, centres of mass at mid-length,
J = m l²/12; gravity along −y. Joints: revolutes O, A, B and the translational joint P.

`driven=True` adds the driving constraint φ_crank = θ0 + ω t ("drive"), which removes the
last degree of freedom (n = m = 9): the motion is then purely kinematic and the multipliers
give the driving torque and the joint reactions.
"""

from __future__ import annotations

import numpy as np

import jaxmbs
from jaxmbs.model.joints import planar

from ._cache import cached

DEFAULTS = {
    "r": 0.15,
    "L": 0.5,
    "m1": 1.0,
    "m2": 1.5,
    "m3": 0.8,
    "J3": 1e-3,
    "g": 9.81,
    "theta0": np.pi / 4,
    "omega": 2 * np.pi,
}


@cached
def slider_crank(driven: bool = False, **params: float) -> jaxmbs.Mechanism:
    """The slider-crank; keyword arguments override `DEFAULTS`."""
    p = {**DEFAULTS, **params}
    bodies = [
        planar.Body("crank", "m1", lambda p: p["m1"] * p["r"] ** 2 / 12),
        planar.Body("rod", "m2", lambda p: p["m2"] * p["L"] ** 2 / 12),
        planar.Body("slider", "m3", "J3"),
    ]
    joints = [
        planar.Revolute("O", 0, lambda p: (-p["r"] / 2, 0.0)),
        planar.Revolute("A", 0, lambda p: (p["r"] / 2, 0.0), 1, lambda p: (-p["L"] / 2, 0.0)),
        planar.Revolute("B", 1, lambda p: (p["L"] / 2, 0.0), 2, (0.0, 0.0)),
        planar.Translational("P", None, (0.0, 0.0), (1.0, 0.0), 2),
    ]
    if driven:
        joints.append(planar.Driving("drive", 2, lambda t, p: p["theta0"] + p["omega"] * t))
    mech = planar.planar_mechanism(bodies, joints, p, gravity=lambda p: (0.0, -p["g"]))
    return mech.with_structure(_configuration(p, p["theta0"]))


def _configuration(p: dict, crank_angle: float) -> np.ndarray:
    A = p["r"] * np.array([np.cos(crank_angle), np.sin(crank_angle)])
    B = np.array([A[0] + np.sqrt(p["L"] ** 2 - A[1] ** 2), 0.0])
    phi2 = np.arctan2(*(B - A)[::-1])
    return np.array([*A / 2, crank_angle, *(A + B) / 2, phi2, *B, 0.0])


def initial_state(
    mechanism: jaxmbs.Mechanism,
    crank_angle: float | None = None,
    crank_speed: float | None = None,
    t0: float = 0.0,
):
    """Consistent (q0, qd0) at time t0; the defaults θ0 + ω t0 and ω follow the drive."""
    p = {k: float(v) for k, v in mechanism.params.items()}
    theta = p["theta0"] + p["omega"] * t0 if crank_angle is None else crank_angle
    qd_guess = np.zeros(9)
    qd_guess[2] = p["omega"] if crank_speed is None else crank_speed
    return jaxmbs.assemble(mechanism, _configuration(p, theta), qd_guess, t0, fixed=("crank.phi",))
