"""Planar four-bar linkage in absolute coordinates (n = 9, m = 8, one degree of freedom).

Links lie along their local x axes with the centre of mass at mid-length. Crank O2–B
(l1 = 0.2 m, 1 kg), coupler B–C (l2 = 0.5 m, 2 kg), rocker C–O4 (l3 = 0.4 m, 1.5 kg),
ground O2 = (0, 0), O4 = (l0, 0) with l0 = 0.45 m (a Grashof crank-rocker); J = m l²/12;
gravity along −y. Revolute joints A (O2), B, C, D (O4).

`redundant=True` adds the distance constraint |O2 B| = l1 on the coupler's end B. It is
implied by the crank, so the motion is unchanged and the redundancy degree is 1.
"""

from __future__ import annotations

import numpy as np

import jaxmbs
from jaxmbs.model.joints import planar

from ._cache import cached

DEFAULTS = {"l0": 0.45, "l1": 0.2, "l2": 0.5, "l3": 0.4, "m1": 1.0, "m2": 2.0, "m3": 1.5, "g": 9.81}


def _half(key: str, sign: float = 1.0):
    return lambda p: (sign * p[key] / 2, 0.0)


def _rod_inertia(m: str, length: str):
    return lambda p: p[m] * p[length] ** 2 / 12


@cached
def fourbar(redundant: bool = False, **params: float) -> jaxmbs.Mechanism:
    """The four-bar; keyword arguments override `DEFAULTS` (lengths, masses, g)."""
    p = {**DEFAULTS, **params}
    bodies = [
        planar.Body("crank", "m1", _rod_inertia("m1", "l1")),
        planar.Body("coupler", "m2", _rod_inertia("m2", "l2")),
        planar.Body("rocker", "m3", _rod_inertia("m3", "l3")),
    ]
    joints = [
        planar.Revolute("A", 0, _half("l1", -1)),
        planar.Revolute("B", 0, _half("l1"), 1, _half("l2", -1)),
        planar.Revolute("C", 1, _half("l2"), 2, _half("l3")),
        planar.Revolute("D", 2, _half("l3", -1), None, lambda p: (p["l0"], 0.0)),
    ]
    if redundant:
        joints.append(planar.Distance("AB", None, (0.0, 0.0), 1, _half("l2", -1), "l1"))
    mech = planar.planar_mechanism(bodies, joints, p, gravity=lambda p: (0.0, -p["g"]))
    return mech.with_structure(_configuration(p, np.pi / 3))


def _configuration(p: dict, crank_angle: float) -> np.ndarray:
    """Closed-form position analysis, branch with C above the ground line."""
    A, D = np.zeros(2), np.array([p["l0"], 0.0])
    B = p["l1"] * np.array([np.cos(crank_angle), np.sin(crank_angle)])
    d = np.linalg.norm(D - B)
    if not abs(p["l2"] - p["l3"]) < d < p["l2"] + p["l3"]:
        raise ValueError(f"the four-bar cannot be assembled at crank angle {crank_angle}")
    a = (p["l2"] ** 2 - p["l3"] ** 2 + d**2) / (2 * d)
    h = np.sqrt(p["l2"] ** 2 - a**2)
    u = (D - B) / d
    C1, C2 = (B + a * u + s * h * np.array([-u[1], u[0]]) for s in (1, -1))
    C = C1 if C1[1] > C2[1] else C2
    phi2 = np.arctan2(*(C - B)[::-1])
    phi3 = np.arctan2(*(C - D)[::-1])
    return np.array([*(A + B) / 2, crank_angle, *(B + C) / 2, phi2, *(C + D) / 2, phi3])


def initial_state(
    mechanism: jaxmbs.Mechanism, crank_angle: float = np.pi / 3, crank_speed: float = 2.0
):
    """Consistent (q0, qd0) with the given crank angle and angular velocity."""
    p = {k: float(v) for k, v in mechanism.params.items()}
    q_guess = _configuration(p, crank_angle)
    qd_guess = np.zeros(9)
    qd_guess[2] = crank_speed
    return jaxmbs.assemble(mechanism, q_guess, qd_guess, fixed=("crank.phi",))
