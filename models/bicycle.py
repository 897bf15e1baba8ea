"""The Whipple benchmark bicycle of Meijaard, Papadopoulos, Ruina and Schwab (Proc. R. Soc. A
463, 2007, "Linearized dynamics equations for the balance and steer of a bicycle: a benchmark
and review"; MPRS below): four rigid bodies — the rear frame B with the rider, the rear
wheel R, the front frame H (fork and handlebar), the front wheel F — hinged at the hubs and
the steer axis, the wheels knife edges rolling without slipping on a horizontal plane.

**Parameters** by the paper's names (Table 1), its values the defaults: wheelbase `w`, trail
`c`, steer-axis tilt `lam` (from the vertical, backwards), gravity `g`; rear wheel radius
`rR`, mass `mR`, moments `IRxx` (= IRzz) and `IRyy` (about the axle); the rear frame's
centre of mass (`xB`, `zB`), mass `mB` and inertia `IBxx`, `IByy`, `IBzz`, `IBxz`; the front
frame's (`xH`, `zH`, `mH`, `IHxx`, `IHyy`, `IHzz`, `IHxz`); the front wheel's `rF`, `mF`,
`IFxx`, `IFyy`. The paper's frame has x forward, y to the right, z down, with the rear
contact at the origin; ours has z up and y to the left (a half turn about x), so a point
(x, y, z) of the paper is (x, −y, −z) here and the products of inertia Ixz change sign.

**Bodies and joints.** The four bodies are spatial bodies in Euler parameters (n = 28),
their frames parallel to the global one in the upright reference configuration; revolutes
join B–R at the rear hub, B–H along the steer axis (through (w + c, 0, 0), tilted back by λ)
and H–F at the front hub; each wheel is a `RollingDisc` (axis: the body's y axis) on the
plane z = 0. That absolute-coordinate mechanism (`four_bodies`) is then written in nine
coordinates (`jaxmbs.map_coordinates`, Attia's velocity transformation),

    θ = (x, y, z, yaw, lean, pitch, steer, rear_wheel, front_wheel),

the rear hub's position, the rear frame's orientation R_B = R_z(yaw) R_x(lean) R_y(pitch),
the steer angle δ (the front frame is R_H = R_B R_s(δ), R_s a rotation about the steer axis)
and the wheels' angles about their axles: the map satisfies the revolutes identically, so
only the rolling joints are pulled back — two holonomic rows (the contacts; they fix z and
the pitch) and four Pfaffian rows (no slip). Seven positions and three velocities (lean
rate, steer rate, speed) are free.

**Linearisation** (`lean_steer_eigenvalues`): upright straight running at speed v is a steady
motion whose cyclic coordinates are x, y, yaw and the wheel angles; `jaxmbs.linearize` about
it, with the independent velocities (lean, steer, rear wheel), gives a 5 × 5 reduced state
matrix in (lean, steer; their rates, the rear wheel's rate). The speed's row vanishes (the
speed is constant to first order), so the lean/steer eigenvalues are those of the leading
4 × 4 block; MPRS's linear model M q̈ + v C₁ q̇ + (g K₀ + v² K₂) q = 0 (their eq 5.3, matrices
from Appendix A: `linear_model`) must give the same.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.model.joints import rolling, spatial

from ._cache import cached

#: MPRS Table 1, the benchmark's parameters (SI units; z down in the paper).
DEFAULTS: dict[str, float] = {
    "w": 1.02,
    "c": 0.08,
    "lam": float(np.pi / 10),
    "g": 9.81,
    "rR": 0.3,
    "mR": 2.0,
    "IRxx": 0.0603,
    "IRyy": 0.12,
    "xB": 0.3,
    "zB": -0.9,
    "mB": 85.0,
    "IBxx": 9.2,
    "IByy": 11.0,
    "IBzz": 2.8,
    "IBxz": 2.4,
    "xH": 0.9,
    "zH": -0.7,
    "mH": 4.0,
    "IHxx": 0.05892,
    "IHyy": 0.06,
    "IHzz": 0.00708,
    "IHxz": -0.00756,
    "rF": 0.35,
    "mF": 3.0,
    "IFxx": 0.1405,
    "IFyy": 0.28,
}
#: The nine coordinates of the bicycle (module docstring).
COORDINATES = (
    "x", "y", "z", "yaw", "lean", "pitch", "steer", "rear_wheel", "front_wheel",
)  # fmt: skip
#: The coordinates that upright straight running leaves out of its linearisation.
CYCLIC = ("x", "y", "yaw", "rear_wheel", "front_wheel")


def _quaternion(axis, angle) -> jax.Array:
    """Euler parameters of the rotation by `angle` about the unit `axis`."""
    half = angle / 2
    return jnp.concatenate([jnp.cos(half)[None], jnp.sin(half) * axis])


def _compose(a, b) -> jax.Array:
    """Euler parameters of A(a) A(b) (the Hamilton product a b)."""
    a0, av, b0, bv = a[0], a[1:], b[0], b[1:]
    return jnp.concatenate([(a0 * b0 - av @ bv)[None], a0 * bv + b0 * av + jnp.cross(av, bv)])


def _steer_axis(p) -> jax.Array:
    """The steer axis, upward and tilted back by λ (rear-frame axes, z up)."""
    return jnp.stack([-jnp.sin(p["lam"]), 0.0, jnp.cos(p["lam"])])


def _reference_points(p) -> dict[str, jax.Array]:
    """Upright, z up, rear contact at the origin: the hubs, the centres of mass of B and H,
    and the steer axis's point on the ground."""
    return {
        "rear_hub": jnp.stack([0.0, 0.0, p["rR"]]),
        "front_hub": jnp.stack([p["w"], 0.0, p["rF"]]),
        "B": jnp.stack([p["xB"], 0.0, -p["zB"]]),
        "H": jnp.stack([p["xH"], 0.0, -p["zH"]]),
        "steer": jnp.stack([p["w"] + p["c"], 0.0, 0.0]),
    }


def _frame_inertia(prefix: str):
    """A frame's inertia tensor about its centre of mass, z up: MPRS's with Ixz negated."""

    def tensor(p):
        xz = -p[f"I{prefix}xz"]
        return jnp.array(
            [
                [p[f"I{prefix}xx"], 0.0, xz],
                [0.0, p[f"I{prefix}yy"], 0.0],
                [xz, 0.0, p[f"I{prefix}zz"]],
            ]
        )

    return tensor


def _wheel_inertia(prefix: str):
    def moments(p):
        return jnp.stack([p[f"I{prefix}xx"], p[f"I{prefix}yy"], p[f"I{prefix}xx"]])

    return moments


def absolute_coordinates(theta, p) -> jax.Array:
    """The map θ ↦ q of the absolute coordinates (4 bodies × (centre, Euler parameters)),
    module docstring: the revolutes hold for every θ."""
    x, y, z, yaw, lean, pitch, steer, rear, front = (theta[i] for i in range(9))
    e_x, e_y, e_z = jnp.eye(3, dtype=theta.dtype)
    ref = _reference_points(p)
    e_B = _compose(_compose(_quaternion(e_z, yaw), _quaternion(e_x, lean)), _quaternion(e_y, pitch))
    e_H = _compose(e_B, _quaternion(_steer_axis(p), steer))
    A_B = spatial.parameter_rotation(e_B)
    A_H = spatial.parameter_rotation(e_H)
    hub = jnp.stack([x, y, z])

    def rear_frame_point(point):
        return hub + A_B @ (point - ref["rear_hub"])

    def front_frame_point(point):
        return rear_frame_point(ref["steer"]) + A_H @ (point - ref["steer"])

    bodies = (
        (rear_frame_point(ref["B"]), e_B),
        (hub, _compose(e_B, _quaternion(e_y, rear))),
        (front_frame_point(ref["H"]), e_H),
        (front_frame_point(ref["front_hub"]), _compose(e_H, _quaternion(e_y, front))),
    )
    return jnp.concatenate([jnp.concatenate(b) for b in bodies])


def _check(params: dict[str, float]) -> dict[str, float]:
    if unknown := sorted(set(params) - set(DEFAULTS)):
        raise ValueError(
            f"bicycle: unknown parameters {unknown}; the benchmark's: {list(DEFAULTS)}"
        )
    p = {**DEFAULTS, **{k: float(v) for k, v in params.items()}}
    if bad := [k for k, v in p.items() if not np.isfinite(v)]:
        raise ValueError(f"bicycle: parameters not finite: {bad}")
    if bad := [k for k in ("w", "rR", "rF", "mR", "mB", "mH", "mF", "g") if p[k] <= 0]:
        raise ValueError(f"bicycle: parameters must be positive: {bad}")
    return p


@cached
def four_bodies(**params: float) -> jaxmbs.Mechanism:
    """The four bodies in absolute coordinates (Euler parameters, n = 28) with the three
    revolutes and the two rolling joints (module docstring), upright at rest as reference;
    parameters as `bicycle`."""
    p = {k: jnp.asarray(v) for k, v in _check(params).items()}
    theta0 = np.array([0.0, 0.0, float(p["rR"]), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    q0 = np.asarray(jax.jit(absolute_coordinates)(jnp.asarray(theta0), p))
    ref = _reference_points

    def relative(a: str, b: str):
        return lambda p: ref(p)[a] - ref(p)[b]

    def zero(p):
        return jnp.zeros(3)

    y_axis = (0.0, 1.0, 0.0)
    bodies = [
        spatial.Body("rear_frame", "mB", _frame_inertia("B")),
        spatial.Body("rear_wheel", "mR", _wheel_inertia("R")),
        spatial.Body("front_frame", "mH", _frame_inertia("H")),
        spatial.Body("front_wheel", "mF", _wheel_inertia("F")),
    ]
    joints = [
        spatial.Revolute("rear_hub", 0, relative("rear_hub", "B"), y_axis, 1, zero, y_axis),
        spatial.Revolute(
            "steer_axis",
            0,
            relative("steer", "B"),
            _steer_axis,
            2,
            relative("steer", "H"),
            _steer_axis,
        ),  # fmt: skip
        spatial.Revolute("front_hub", 2, relative("front_hub", "H"), y_axis, 3, zero, y_axis),
        rolling.RollingDisc("rear_contact", 1, radius="rR", axis=y_axis),
        rolling.RollingDisc("front_contact", 3, radius="rF", axis=y_axis),
    ]
    gravity = lambda p: jnp.stack([0.0, 0.0, -p["g"]])  # noqa: E731
    return spatial.spatial_mechanism(bodies, joints, p, gravity=gravity, reference_q=q0)


@cached
def bicycle(**params: float) -> jaxmbs.Mechanism:
    """The benchmark bicycle (module docstring) in the nine coordinates `COORDINATES`
    (reference: upright at rest), parameters by MPRS's names (`DEFAULTS`), mapped from
    `four_bodies(**params)`. Unknown, non-finite or non-positive (lengths, masses, g)
    parameters are refused by name before anything compiles."""
    theta0 = np.array([0.0, 0.0, _check(params)["rR"], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    return jaxmbs.map_coordinates(
        four_bodies(**params),
        absolute_coordinates,
        theta0,
        keep=("rear_contact", "rear_contact.no_slip", "front_contact", "front_contact.no_slip"),
        coordinate_names=COORDINATES,
    )


def upright_state(mechanism: jaxmbs.Mechanism, v, params=None) -> tuple[jax.Array, jax.Array]:
    """Upright straight running at speed v (θ, θ̇): the rear hub at height rR, the wheels
    turning at v / rR and v / rF; `params` a partial mapping as in `linearize`."""
    p = {**mechanism.params, **(params or {})}
    v = jnp.asarray(v, dtype=jnp.result_type(float))
    zero = jnp.zeros((), v.dtype)
    theta = jnp.stack([zero, zero, p["rR"] + zero, *([zero] * 6)])
    rates = jnp.stack([v, *([zero] * 6), v / p["rR"], v / p["rF"]])
    return theta, rates


def lean_steer_eigenvalues(mechanism: jaxmbs.Mechanism, v, params=None, **options) -> jax.Array:
    """The four eigenvalues of the lean/steer motion about upright straight running at speed v
    (module docstring): `jaxmbs.linearize` about the steady motion with `CYCLIC` left out, the
    independent velocities (lean, steer, rear_wheel), the speed's row and column dropped.
    Jittable and differentiable in v and `params`; `options` go to `linearize`."""
    theta, rates = upright_state(mechanism, v, params)
    lin = jaxmbs.linearize(
        mechanism, theta, rates, params=params, cyclic=CYCLIC, positions=("lean", "steer"),
        velocities=("lean", "steer", "rear_wheel"), **options,
    )  # fmt: skip
    return jnp.linalg.eigvals(lin.A[:4, :4])


def linear_model(**params: float) -> dict[str, np.ndarray]:
    """MPRS's linear lean/steer model M q̈ + v C₁ q̇ + (g K₀ + v² K₂) q = 0, q = (lean φ,
    steer δ), its matrices from the parameters by the formulas of their Appendix A (total
    mass and centre of mass, the front assembly A = H + F about the steer axis, μ = c cos λ / w,
    the gyroscopic coefficients S_R = I_Ryy / r_R, S_F = I_Fyy / r_F). Returns M, C1, K0, K2."""
    p = _check(params)
    w, c, lam = p["w"], p["c"], p["lam"]
    rR, rF, xB, zB, xH, zH = p["rR"], p["rF"], p["xB"], p["zB"], p["xH"], p["zH"]
    mR, mB, mH, mF = p["mR"], p["mB"], p["mH"], p["mF"]
    sl, cl = np.sin(lam), np.cos(lam)
    mT = mR + mB + mH + mF
    xT = (xB * mB + xH * mH + w * mF) / mT
    zT = (-rR * mR + zB * mB + zH * mH - rF * mF) / mT
    ITxx = p["IRxx"] + p["IBxx"] + p["IHxx"] + p["IFxx"] + mR * rR**2 + mB * zB**2
    ITxx += mH * zH**2 + mF * rF**2
    ITxz = p["IBxz"] + p["IHxz"] - mB * xB * zB - mH * xH * zH + mF * w * rF
    ITzz = p["IRxx"] + p["IBzz"] + p["IHzz"] + p["IFxx"] + mB * xB**2 + mH * xH**2 + mF * w**2
    mA = mH + mF
    xA, zA = (xH * mH + w * mF) / mA, (zH * mH - rF * mF) / mA
    IAxx = p["IHxx"] + p["IFxx"] + mH * (zH - zA) ** 2 + mF * (rF + zA) ** 2
    IAxz = p["IHxz"] - mH * (xH - xA) * (zH - zA) + mF * (w - xA) * (rF + zA)
    IAzz = p["IHzz"] + p["IFxx"] + mH * (xH - xA) ** 2 + mF * (w - xA) ** 2
    uA = (xA - w - c) * cl - zA * sl
    IAll = mA * uA**2 + IAxx * sl**2 + 2 * IAxz * sl * cl + IAzz * cl**2
    IAlx = -mA * uA * zA + IAxx * sl + IAxz * cl
    IAlz = mA * uA * xA + IAxz * sl + IAzz * cl
    mu = c / w * cl
    SR, SF = p["IRyy"] / rR, p["IFyy"] / rF
    ST, SA = SR + SF, mA * uA + mu * mT * xT
    M = np.array(
        [[ITxx, IAlx + mu * ITxz], [IAlx + mu * ITxz, IAll + 2 * mu * IAlz + mu**2 * ITzz]]
    )
    K0 = np.array([[mT * zT, -SA], [-SA, -SA * sl]])
    K2 = np.array([[0.0, (ST - mT * zT) * cl / w], [0.0, (SA + SF * sl) * cl / w]])
    C1 = np.array(
        [
            [0.0, mu * ST + SF * cl + ITxz * cl / w - mu * mT * zT],
            [-(mu * ST + SF * cl), IAlz * cl / w + mu * (SA + ITzz * cl / w)],
        ]
    )
    return {"M": M, "C1": C1, "K0": K0, "K2": K2}
