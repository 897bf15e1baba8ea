"""Planar four-bar in relative coordinates q = [α1, α2, α3], cut at O4 (Blajer, Schiehlen,
Schirm 1993 and 1994, Fig. 2).

The open chain is a planar manipulator O1–O2–O3–E whose end point E is held at the ground pin
O4: Φ = E(q) − O4 = 0 (n = 3, m = 2, one degree of freedom). O1 is the origin, O4 = (l0, 0);
link i has length lᵢ and points along (sin θᵢ, cos θᵢ) with the absolute angles θ1 = α1,
θ2 = α1 + α2, θ3 = α1 + α2 + α3, so that |O2 O4|² = l0² + l1² − 2 l0 l1 sin α1 (1993 eq 16).
The links are uniform rods (centre at mid-length, J = m l²/12); gravity acts along −y.

Closing conditions (1993 eqs 17–18), resolved by inverse kinematics after cutting at O2 and O4:

- case a, α1 independent: α3 = σ arccos((l0² + l1² − l2² − l3² − 2 l0 l1 sin α1) / (2 l2 l3)),
  singular where sin α3 = 0; branch σ = sign(sin α3);
- case b, α3 independent: α1 = π/2 + σ arccos((l0² + l1² − l2² − l3² − 2 l2 l3 cos α3) /
  (2 l0 l1)), singular where cos α1 = 0; branch σ = sign(sin(α1 − π/2));
- both: α2 from sin α2 and cos α2 of eq 18.

Two link sets are provided: `FIG3` (the default; a crank at O1, so α1 is never singular, as
in the 1994 paper's Fig. 3) and `CRANK_AT_O4` (the short link at O4 turns fully, so links 2 and
3 line up twice a turn: sin α3 = 0, singular for α1, while cos α1 never vanishes).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs

from ._cache import cached

FIG3 = {"l0": 1.0, "l1": 0.3, "l2": 1.0, "l3": 0.8, "m1": 1.0, "m2": 1.0, "m3": 1.0, "g": 9.81}
CRANK_AT_O4 = {"l0": 1.0, "l1": 0.8, "l2": 1.0, "l3": 0.3, "m1": 1.0, "m2": 1.0, "m3": 1.0,
               "g": 9.81}  # fmt: skip


def _direction(theta):
    return jnp.stack([jnp.sin(theta), jnp.cos(theta)])


def joints(q, p):
    """O2, O3 and the chain's end point E (which the constraint holds at O4)."""
    theta = jnp.cumsum(q)
    o2 = p["l1"] * _direction(theta[0])
    o3 = o2 + p["l2"] * _direction(theta[1])
    return o2, o3, o3 + p["l3"] * _direction(theta[2])


def _centres(q, p):
    o2, o3, end = joints(q, p)
    return jnp.stack([o2 / 2, (o2 + o3) / 2, (o3 + end) / 2])


def _masses(p):
    return jnp.stack([p["m1"], p["m2"], p["m3"]])


def _kinetic_energy(q, qd, p):
    _, v = jax.jvp(lambda q_: _centres(q_, p), (q,), (qd,))
    omega = jnp.cumsum(qd)
    lengths = jnp.stack([p["l1"], p["l2"], p["l3"]])
    inertia = _masses(p) * lengths**2 / 12
    return 0.5 * jnp.sum(_masses(p) * jnp.sum(v * v, axis=1)) + 0.5 * jnp.sum(inertia * omega**2)


def _potential_energy(q, p):
    return p["g"] * jnp.sum(_masses(p) * _centres(q, p)[:, 1])


def _cut_joint(t, q, p):
    return joints(q, p)[2] - jnp.stack([p["l0"], jnp.zeros_like(p["l0"])])


@cached
def fourbar_relative(**params: float) -> jaxmbs.Mechanism:
    """The four-bar in relative coordinates; keyword arguments override `FIG3`."""
    p = {**FIG3, **params}
    lagrangian = jaxmbs.Mechanism.from_lagrangian(
        _kinetic_energy, _potential_energy, _cut_joint, params=p, n=3
    )

    def mass_matrix(q, p):
        # The autodiff Hessian ∂²T/∂q̇² is symmetric only to round-off (visible in float32).
        M = lagrangian.mass_matrix(q, p)
        return 0.5 * (M + M.T)

    return jaxmbs.Mechanism(
        mass_matrix,
        lagrangian.forces,
        _cut_joint,
        params=p,
        coordinate_names=("alpha1", "alpha2", "alpha3"),
        constraint_groups={"O4": (0, 1)},
        potential_energy=_potential_energy,
        reference_q=configuration(p, _reference_crank_angle(p), 1.0),
    )


# ----------------------------------------------------------------- closing conditions


def _alpha2(alpha1, alpha3, p):
    """α2 from its sine and cosine (1993 eq 18)."""
    l0, l1, l2, l3 = p["l0"], p["l1"], p["l2"], p["l3"]
    s = l0 * l2 * jnp.cos(alpha1) + l0 * l3 * jnp.cos(alpha1 + alpha3) + l1 * l3 * jnp.sin(alpha3)
    c = (
        l0 * l2 * jnp.sin(alpha1)
        + l0 * l3 * jnp.sin(alpha1 + alpha3)
        - l1 * l3 * jnp.cos(alpha3)
        - l1 * l2
    )
    return jnp.arctan2(s, c)  # the common positive factor 1/|O2 O4|² cancels


def closing_a(t, q_I, p, branch):
    """Case a: [α2, α3] from α1 (1993 eqs 17a, 18); `branch` = sign of sin α3."""
    l0, l1, l2, l3 = p["l0"], p["l1"], p["l2"], p["l3"]
    alpha1 = q_I[0]
    cos3 = (l0**2 + l1**2 - l2**2 - l3**2 - 2 * l0 * l1 * jnp.sin(alpha1)) / (2 * l2 * l3)
    alpha3 = branch[0] * jnp.arccos(cos3)
    return jnp.stack([_alpha2(alpha1, alpha3, p), alpha3])


def closing_b(t, q_I, p, branch):
    """Case b: [α1, α2] from α3 (1993 eqs 17b, 18); `branch` = sign of sin(α1 − π/2)."""
    l0, l1, l2, l3 = p["l0"], p["l1"], p["l2"], p["l3"]
    alpha3 = q_I[0]
    cos1 = (l0**2 + l1**2 - l2**2 - l3**2 - 2 * l2 * l3 * jnp.cos(alpha3)) / (2 * l0 * l1)
    alpha1 = jnp.pi / 2 + branch[0] * jnp.arccos(cos1)
    return jnp.stack([alpha1, _alpha2(alpha1, alpha3, p)])


def _sign(x):
    return jnp.where(x >= 0, 1.0, -1.0)


def closing_variants() -> tuple[jaxmbs.ClosingVariant, jaxmbs.ClosingVariant]:
    """(case a: α1 independent, case b: α3 independent)."""
    case_a = jaxmbs.ClosingVariant(
        ("alpha1",), closing_a, lambda q, p: _sign(jnp.sin(q[2]))[None], name="a"
    )
    case_b = jaxmbs.ClosingVariant(
        ("alpha3",), closing_b, lambda q, p: _sign(-jnp.cos(q[0]))[None], name="b"
    )
    return case_a, case_b


# ------------------------------------------------------------------ initial conditions


def _reference_crank_angle(p: dict) -> float:
    """An α1 at which the linkage assembles, away from singular positions."""
    grid = np.linspace(0.0, 2 * np.pi, 721)
    cos3 = (p["l0"] ** 2 + p["l1"] ** 2 - p["l2"] ** 2 - p["l3"] ** 2
            - 2 * p["l0"] * p["l1"] * np.sin(grid)) / (2 * p["l2"] * p["l3"])  # fmt: skip
    score = (1 - np.minimum(np.abs(cos3), 1.0)) * np.abs(np.cos(grid))
    if score.max() <= 0:
        raise ValueError("this four-bar cannot be assembled at any α1")
    return float(grid[np.argmax(score)])


def configuration(p: dict, alpha1: float, branch: float = 1.0) -> np.ndarray:
    """[α1, α2, α3] from the case-a closing conditions (NumPy, outside jit)."""
    p = {k: float(v) for k, v in p.items()}
    q_D = closing_a(0.0, jnp.array([alpha1]), p, jnp.array([branch]))
    if not np.all(np.isfinite(q_D)):
        raise ValueError(f"the four-bar cannot be assembled at α1 = {alpha1}")
    return np.array([alpha1, *np.asarray(q_D)])


def initial_state(
    mechanism: jaxmbs.Mechanism, alpha1: float, alpha1_dot: float, branch: float = 1.0
):
    """Consistent (q0, q̇0) with the given α1, α̇1 and sign of sin α3."""
    q = configuration(mechanism.params, alpha1, branch)
    qd = np.zeros(3)
    qd[0] = alpha1_dot
    return jaxmbs.assemble(mechanism, q, qd, fixed=("alpha1",))
