"""Planar mobile robot with a trolley (Wojtyra–Frączek 2013, §4 and Appendix, Tables 1–3).

Seven moving bodies in absolute coordinates (n = 21): 1 the robot platform, 2 and 3 the
steered wheel carriers at B and C, 4 and 5 the steering links, 6 the steering slider, 7 the
trolley. Revolute joints A–G and the translational joint H (slider 6 along the platform's
y axis) give 16 holonomic rows, the steering drive one more (m = 17); the wheels are knife
edges W1–W5 (h = 5): W1, W2 on the carriers, W3, W4 on the platform's axle at (0, ∓4a), W5
on the trolley. Rows are numbered as in the paper (A, B, …, G, H, drive, W1, …, W5), so the
paper's constraint k is row k − 1 here. At a generic configuration rank Φ_q = 17, the
Pfaffian block has rank 4 and rank C = 20: the redundancy is p = 2 (paper eq 35).

Geometry (Table 3): a = 0.05 m, γ = arctan(1/4), b = a(sin γ, cos γ), c_x = 4a − b_x,
c_y = √(25a² − c_x²). Masses and central inertias: Table 2. No applied forces (the robot
moves on a horizontal floor; the wheel–floor forces are the knife-edge reactions).

Steering (Fig. 2 of the paper is not available, so this profile is our choice): the drive
prescribes the rise δ(t) of the slider 6 along the platform's y axis, measured from its
position in q0,

    δ(t) = A s((t − t_r)/T) − A s((t − t_l)/T),   s(u) = sin⁴(πu) on [0, 1], else 0,

with A = 0.02 m, T = 4 s, t_r = 0.5 s and t_l = 5.5 s (10 s of motion). s is C³ with
s = s' = s'' = 0 at both ends, so δ̈ (which enters Γ) is continuous. Raising the slider
(δ > 0) turns the wheels so that the robot turns right (clockwise seen from above); the
two lobes are mirror images, so the robot first turns right, runs straight, turns left and
leaves along a line nearly parallel to x0.

Initial state: q0 (eq 34) and every body moving along x0 at v = 0.1 m/s (eq 39); at t = 0
the slider is at rest relative to the platform, as the drive requires.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.model.joints import planar

from ._cache import cached

DEFAULTS = {
    "a": 0.05,
    # Table 2: masses (kg) and central moments of inertia (kg m²).
    "m1": 10.0,
    "J1": 0.25,
    "m2": 1.0,
    "J2": 0.005,
    "m3": 1.0,
    "J3": 0.005,
    "m4": 1.0,
    "J4": 0.005,
    "m5": 1.0,
    "J5": 0.005,
    "m6": 1.0,
    "J6": 0.005,
    "m7": 5.0,
    "J7": 0.05,
    # Steering profile δ(t) (our choice; see the module docstring).
    "steer_amplitude": 0.02,
    "steer_duration": 4.0,
    "t_right": 0.5,
    "t_left": 5.5,
    # Initial speed (eq 39).
    "v": 0.1,
}

BODY_NAMES = ("platform", "carrier2", "carrier3", "link4", "link5", "slider6", "trolley")

#: The paper's constraint numbering (1-based) → our rows (0-based): row = k − 1.
#: Elimination variants of §4.4: the paper's rows {6, 21}, {18, 21} and {19, 21}.
PAPER_ELIMINATIONS = {"C_y+W4": (5, 20), "W1+W4": (17, 20), "W2+W4": (18, 20)}

#: Groups whose reactions are unique (paper §4.2) and those that are not.
SOLVABLE = ("A", "D", "E", "F", "G", "H", "drive", "W5")
NOT_SOLVABLE = ("B", "C", "W1", "W2", "W3", "W4")


def points(p) -> dict:
    """Joint points in the body frames (Table 3: s_P on body i, s_Q on body j) and the
    knife-edge contact points (Table 1), as functions of a so that gradients reach it."""
    a = jnp.asarray(p["a"])
    gamma = jnp.arctan(0.25)
    bx, by = a * jnp.sin(gamma), a * jnp.cos(gamma)
    cx = 4 * a - bx
    cy = jnp.sqrt(25 * a**2 - cx**2)
    return {
        "A7": (7 * a, 0.0),
        "A1": (-8 * a, 0.0),
        "B1": (4 * a, 0.0),
        "C1": (-4 * a, 0.0),
        "D4": (cx / 2, -cy / 2),
        "D2": (-bx, -by),
        "E5": (-cx / 2, -cy / 2),
        "E3": (bx, -by),
        "F6": (0.0, cy - by),
        "F4": (-cx / 2, cy / 2),
        "G6": (0.0, cy - by),
        "G5": (cx / 2, cy / 2),
        "H6": (0.0, 10 * a),
        "H1": (0.0, -10 * a),
        "L1": (0.0, -4 * a),
        "M1": (0.0, 4 * a),
    }


def _at(key: str):
    """A point specification: the named point of `points`."""
    return lambda p: points(p)[key]


def _bump(u):
    """sin⁴(πu) on [0, 1], zero elsewhere (C³ at the ends)."""
    inside = (u > 0) & (u < 1)
    return jnp.where(inside, jnp.sin(jnp.pi * jnp.clip(u, 0.0, 1.0)) ** 4, 0.0)


def steering(t, p):
    """Slider rise δ(t): a right-turn lobe (δ > 0), then a mirror left-turn lobe."""
    amplitude, duration = p["steer_amplitude"], p["steer_duration"]
    return amplitude * (_bump((t - p["t_right"]) / duration) - _bump((t - p["t_left"]) / duration))


def _slider_rise(q, p):
    """Rise of the slider's point P6 over the platform's point Q1 along the platform's y
    axis, minus its value 20a in q0 (the paper's driving constraint, Appendix eq 43)."""
    rise = planar.point(q, 5, jnp.asarray(points(p)["H6"])) - planar.point(
        q, 0, jnp.asarray(points(p)["H1"])
    )
    return rise @ (planar.rotation(q[2]) @ jnp.array([0.0, 1.0])) - 20 * p["a"]


def joints() -> list:
    """Joints in the paper's row order: A–G, H, the drive, then W1–W5 (Tables 1 and 3;
    bodies 1…7 of the paper are 0…6 here)."""
    origin = (0.0, 0.0)
    return [
        planar.Revolute("A", 6, _at("A7"), 0, _at("A1")),
        planar.Revolute("B", 1, origin, 0, _at("B1")),
        planar.Revolute("C", 2, origin, 0, _at("C1")),
        planar.Revolute("D", 3, _at("D4"), 1, _at("D2")),
        planar.Revolute("E", 4, _at("E5"), 2, _at("E3")),
        planar.Revolute("F", 5, _at("F6"), 3, _at("F4")),
        planar.Revolute("G", 5, _at("G6"), 4, _at("G5")),
        # Slider 6 moves along the platform's y axis; the normal is −x so that the row
        # reads (Q1 − P6)ᵀ R1 [1, 0]ᵀ as in the paper (Appendix eq 42).
        planar.Translational("H", 0, _at("H1"), (0.0, 1.0), 5, _at("H6")),
        planar.Driving("drive", _slider_rise, steering),
        planar.KnifeEdge("W1", 1, origin),
        planar.KnifeEdge("W2", 2, origin),
        planar.KnifeEdge("W3", 0, _at("L1")),
        planar.KnifeEdge("W4", 0, _at("M1")),
        planar.KnifeEdge("W5", 6, origin),
    ]


def configuration(a: float = DEFAULTS["a"]) -> np.ndarray:
    """q0 of the paper (eq 34): everything aligned with x0, the slider at δ = 0."""
    gamma = np.arctan(0.25)
    bx, by = a * np.sin(gamma), a * np.cos(gamma)
    cx = 4 * a - bx
    cy = np.sqrt(25 * a**2 - cx**2)
    dx, dy = cx / 2, cy / 2 - by
    return np.array(
        [
            *(20 * a, 0.0, 0.0),
            *(24 * a, 0.0, 0.0),
            *(16 * a, 0.0, 0.0),
            *(20 * a + dx, dy, 0.0),
            *(20 * a - dx, dy, 0.0),
            *(20 * a, 0.0, 0.0),
            *(5 * a, 0.0, 0.0),
        ]
    )


@cached
def mobile_robot(**params: float) -> jaxmbs.Mechanism:
    """The robot with trolley; keyword arguments override `DEFAULTS`."""
    p = {**DEFAULTS, **params}
    bodies = [planar.Body(name, f"m{k + 1}", f"J{k + 1}") for k, name in enumerate(BODY_NAMES)]
    mech = planar.planar_mechanism(bodies, joints(), p, gravity=(0.0, 0.0))
    return mech.with_structure(configuration(p["a"]))


def initial_state(mechanism: jaxmbs.Mechanism):
    """q0 (eq 34) and q̇0 (eq 39): every body translates along x0 at speed v."""
    p = mechanism.params
    qd = np.zeros(21)
    qd[0::3] = float(p["v"])
    return jaxmbs.assemble(mechanism, configuration(float(p["a"])), qd)
