"""Plain NumPy/SciPy baseline for the jaxmbs benchmarks.

Planar multibody dynamics in absolute coordinates q = (x_i, y_i, phi_i) with
revolute joints, solved by the QR null-space method (Pękal & Frączek 2016,
eqs 3.29-3.36; multipliers from eq 3.7) or by the range-space (Wang–Huston) method
(eqs 3.40-3.41: a Cholesky factorisation of Phi_q M^-1 Phi_q^T), and integrated with
``scipy.integrate.solve_ivp`` (RK45 by default).  The constraint Jacobian and the
acceleration right-hand side are hand-written and vectorised over joints; this
is the reference the JAX implementation is compared against.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp
from scipy.linalg import cho_factor, cho_solve, solve_triangular

Point = Sequence[float]
Joint = tuple[int | None, Point, int | None, Point]  # (i, s_i, j, s_j); None is ground


@dataclass(frozen=True)
class Model:
    """Planar multibody model; joint data are stored per side (0: body i, 1: body j)."""

    mass_diag: np.ndarray  # (n,) diagonal of M
    force: np.ndarray  # (n,) generalised gravity force Q_e
    body: np.ndarray  # (2, k) body index of each joint side, clipped to 0 for ground
    live: np.ndarray  # (2, k) 1.0 for a body side, 0.0 for ground
    local: np.ndarray  # (2, k, 2) joint point: body frame, or global for ground
    jac0: np.ndarray  # (2k, n) constant (translational) part of Phi_q
    rows: np.ndarray  # row / column / sign of the angular entries of Phi_q
    cols: np.ndarray
    signs: np.ndarray
    sides: np.ndarray  # indices of the body (non-ground) sides in the flattened (2, k) layout


def make_model(
    masses: Sequence[float], inertias: Sequence[float], joints: list[Joint], g: float = 9.81
) -> Model:
    """Build a model from body masses, centroidal inertias and revolute joints."""
    masses, inertias = np.asarray(masses, float), np.asarray(inertias, float)
    nb, k = len(masses), len(joints)
    mass_diag = np.stack([masses, masses, inertias], axis=1).ravel()
    force = np.zeros(3 * nb)
    force[1::3] = -masses * g
    body = np.array([[-1 if jt[2 * s] is None else jt[2 * s] for jt in joints] for s in (0, 1)])
    local = np.array([[np.asarray(jt[2 * s + 1], float) for jt in joints] for s in (0, 1)])
    sign = np.array([1.0, -1.0])[:, None] * np.ones((2, k))
    joint = np.broadcast_to(np.arange(k), (2, k))
    sides = np.flatnonzero(body.ravel() >= 0)
    b, p, sg = body.ravel()[sides], joint.ravel()[sides], sign.ravel()[sides]
    jac0 = np.zeros((2 * k, 3 * nb))
    jac0[2 * p, 3 * b] = sg
    jac0[2 * p + 1, 3 * b + 1] = sg
    return Model(
        mass_diag,
        force,
        np.maximum(body, 0),
        (body >= 0).astype(float),
        local,
        jac0,
        np.concatenate([2 * p, 2 * p + 1]),
        np.concatenate([3 * b + 2, 3 * b + 2]),
        np.concatenate([sg, sg]),
        sides,
    )


def _rotated(model: Model, q: np.ndarray) -> np.ndarray:
    """A(phi) s for every joint side, zero on ground sides; shape (2, k, 2)."""
    phi = q[3 * model.body + 2]
    c, s = np.cos(phi) * model.live, np.sin(phi) * model.live
    sx, sy = model.local[..., 0], model.local[..., 1]
    return np.stack([c * sx - s * sy, s * sx + c * sy], axis=-1)


def constraints(model: Model, q: np.ndarray) -> np.ndarray:
    """Constraint vector Phi(q), shape (2k,)."""
    r = np.stack([q[3 * model.body], q[3 * model.body + 1]], axis=-1)
    live = model.live[..., None]
    pts = live * (r + _rotated(model, q)) + (1.0 - live) * model.local
    return (pts[0] - pts[1]).ravel()


def jacobian_and_gamma(
    model: Model, q: np.ndarray, qd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Phi_q and Gamma with Phi_q qdd = Gamma (Gamma = A_i s_i w_i^2 - A_j s_j w_j^2)."""
    a_s = _rotated(model, q)
    w2 = qd[3 * model.body + 2] ** 2
    gamma = (a_s[0] * w2[0, :, None] - a_s[1] * w2[1, :, None]).ravel()
    flat = a_s.reshape(-1, 2)[model.sides]  # A' s = (-(A s)_y, (A s)_x)
    jac = model.jac0.copy()
    jac[model.rows, model.cols] = model.signs * np.concatenate([-flat[:, 1], flat[:, 0]])
    return jac, gamma


def _solve(
    model: Model, q: np.ndarray, qd: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """QR null-space solve; return qdd and the factors Q1, R1 of Phi_q^T."""
    jac, gamma = jacobian_and_gamma(model, q, qd)
    m = jac.shape[0]
    q_mat, r_mat = np.linalg.qr(jac.T, mode="complete")
    q1, p, r1 = q_mat[:, :m], q_mat[:, m:], r_mat[:m, :m]
    qdd_p = q1 @ solve_triangular(r1.T, gamma, lower=True)
    reduced = p.T @ (model.mass_diag[:, None] * p)
    vdd = cho_solve(cho_factor(reduced), p.T @ (model.force - model.mass_diag * qdd_p))
    return qdd_p + p @ vdd, q1, r1


def _range_space(model: Model, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
    """qdd = M^-1 (Q - Phi_q^T lambda) with (Phi_q M^-1 Phi_q^T) lambda = Phi_q M^-1 Q - Gamma."""
    jac, gamma = jacobian_and_gamma(model, q, qd)
    scaled = jac / model.mass_diag  # Phi_q M^-1
    lam = cho_solve(cho_factor(scaled @ jac.T), scaled @ model.force - gamma)
    return (model.force - jac.T @ lam) / model.mass_diag


#: The formulations of the baseline, by the name of the jaxmbs method they correspond to.
FORMULATIONS = {
    "qr": lambda model, q, qd: _solve(model, q, qd)[0],
    "range-space": _range_space,
}


def accelerations(model: Model, q: np.ndarray, qd: np.ndarray, method: str = "qr") -> np.ndarray:
    """qdd by the QR null-space method (particular + null-space part) or the range-space
    method (`method="range-space"`)."""
    return FORMULATIONS[method](model, q, qd)


def multipliers(model: Model, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
    """Lagrange multipliers with M qdd + Phi_q^T lambda = Q_e."""
    qdd, q1, r1 = _solve(model, q, qd)
    return solve_triangular(r1, q1.T @ (model.force - model.mass_diag * qdd))


def rhs(model: Model, t: float, y: np.ndarray, formulation: str = "qr") -> np.ndarray:
    """First-order ODE right-hand side for y = [q, qd]."""
    n = y.size // 2
    return np.concatenate([y[n:], accelerations(model, y[:n], y[n:], formulation)])


def energy(model: Model, q: np.ndarray, qd: np.ndarray) -> float:
    """Kinetic plus gravitational potential energy."""
    return 0.5 * qd @ (model.mass_diag * qd) - model.force @ q


def simulate(
    model: Model,
    q0: np.ndarray,
    qd0: np.ndarray,
    t1: float,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    method: str = "RK45",
    formulation: str = "qr",
) -> tuple[np.ndarray, int, int, bool]:
    """Integrate over (0, t1) with SciPy's `method` (RK45 by default) and the `formulation`
    (`"qr"` or `"range-space"`); return (final y, nfev, steps, success)."""
    res = solve_ivp(
        lambda t, y: rhs(model, t, y, formulation),
        (0.0, t1),
        np.concatenate([q0, qd0]),
        method=method,
        rtol=rtol,
        atol=atol,
    )
    return res.y[:, -1], res.nfev, len(res.t) - 1, res.success


FOURBAR_L, FOURBAR_M, FOURBAR_O4 = (0.2, 0.5, 0.4), (1.0, 2.0, 1.5), np.array([0.45, 0.0])


def fourbar_model(g: float = 9.81) -> Model:
    """Crank-coupler-rocker four-bar with ground pivots O2 = (0, 0), O4 = (0.45, 0)."""
    (l1, l2, l3), m = FOURBAR_L, np.array(FOURBAR_M)
    joints = [
        (None, (0.0, 0.0), 0, (-l1 / 2, 0.0)),
        (0, (l1 / 2, 0.0), 1, (-l2 / 2, 0.0)),
        (1, (l2 / 2, 0.0), 2, (l3 / 2, 0.0)),
        (2, (-l3 / 2, 0.0), None, tuple(FOURBAR_O4)),
    ]
    return make_model(m, m * np.array(FOURBAR_L) ** 2 / 12, joints, g)


def chain_model(n_links: int, length: float = 1.0, mass: float = 1.0, g: float = 9.81) -> Model:
    """N-link pendulum chain hanging from the origin."""
    h = length / 2
    joints = [(None, (0.0, 0.0), 0, (-h, 0.0))]
    joints += [(k - 1, (h, 0.0), k, (-h, 0.0)) for k in range(1, n_links)]
    return make_model(np.full(n_links, mass), np.full(n_links, mass * length**2 / 12), joints, g)


def _velocity_with_fixed(model: Model, q: np.ndarray, index: int, value: float) -> np.ndarray:
    """Solve Phi_q qd = 0 together with qd[index] = value."""
    jac, _ = jacobian_and_gamma(model, q, np.zeros_like(q))
    row = np.zeros((1, q.size))
    row[0, index] = 1.0
    rhs_vec = np.zeros(jac.shape[0] + 1)
    rhs_vec[-1] = value
    return np.linalg.solve(np.vstack([jac, row]), rhs_vec)


def _unit(a: float) -> np.ndarray:
    return np.array([np.cos(a), np.sin(a)])


def fourbar_initial_state(
    crank_angle: float = np.pi / 3, crank_speed: float = 2.0
) -> tuple[np.ndarray, np.ndarray]:
    """Consistent (q0, qd0), assembly branch with joint C above the ground line."""
    l1, l2, l3 = FOURBAR_L
    b = l1 * _unit(crank_angle)
    d_vec = FOURBAR_O4 - b
    d = np.linalg.norm(d_vec)
    a = (l2**2 - l3**2 + d**2) / (2 * d)
    foot, perp = b + a * d_vec / d, np.array([-d_vec[1], d_vec[0]]) / d
    cands = [foot + sgn * np.sqrt(l2**2 - a**2) * perp for sgn in (1.0, -1.0)]
    c = max(cands, key=lambda p: p[1])
    phi1, phi2 = np.arctan2(*(c - b)[::-1]), np.arctan2(*(c - FOURBAR_O4)[::-1])
    q0 = np.concatenate([b / 2, [crank_angle], (b + c) / 2, [phi1], (FOURBAR_O4 + c) / 2, [phi2]])
    qd0 = _velocity_with_fixed(fourbar_model(), q0, 2, crank_speed)
    return q0, qd0


def chain_initial_state(
    n_links: int, angle: float = np.pi / 4, length: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Straight chain at `angle` from the downward vertical, at rest."""
    phi = -np.pi / 2 + angle
    centres = (np.arange(n_links)[:, None] + 0.5) * length * _unit(phi)
    q0 = np.column_stack([centres, np.full(n_links, phi)]).ravel()
    return q0, np.zeros_like(q0)


def _self_check() -> None:
    rng = np.random.default_rng(0)
    four, (q4, qd4) = fourbar_model(), fourbar_initial_state()
    jac4, _ = jacobian_and_gamma(four, q4, qd4)
    print(
        f"four-bar |Phi| = {np.abs(constraints(four, q4)).max():.2e}, "
        f"|Phi_q qd| = {np.abs(jac4 @ qd4).max():.2e}"
    )
    assert np.abs(constraints(four, q4)).max() < 1e-12 and np.abs(jac4 @ qd4).max() < 1e-12
    for model, n in ((four, 9), (chain_model(5), 15)):
        q, qd = rng.normal(size=n), rng.normal(size=n)
        jac, gamma = jacobian_and_gamma(model, q, qd)
        h, eye = 1e-6, np.eye(n)
        fd_jac = np.column_stack(
            [(constraints(model, q + h * e) - constraints(model, q - h * e)) / (2 * h) for e in eye]
        )
        # Along q(t) = q + t qd: d/dt (Phi_q qd) = -Gamma.
        fd_gamma = (
            -(
                jacobian_and_gamma(model, q + h * qd, qd)[0]
                - jacobian_and_gamma(model, q - h * qd, qd)[0]
            )
            @ qd
            / (2 * h)
        )
        err_j, err_g = np.abs(fd_jac - jac).max(), np.abs(fd_gamma - gamma).max()
        print(f"n={n}: Jacobian FD error {err_j:.1e}, Gamma FD error {err_g:.1e}")
        assert err_j < 1e-7 and err_g < 1e-7
    y, *_ = simulate(four, q4, qd4, 2.0, rtol=1e-10, atol=1e-10)
    e0, e1 = energy(four, q4, qd4), energy(four, y[:9], y[9:])
    print(f"four-bar energy drift over 2 s: {abs(e1 - e0) / abs(e0):.1e} (relative)")
    assert abs(e1 - e0) < 1e-6 * abs(e0)
    lam, qdd4 = multipliers(four, q4, qd4), accelerations(four, q4, qd4)
    err_l = np.abs(four.mass_diag * qdd4 + jac4.T @ lam - four.force).max()
    print(f"four-bar |M qdd + Phi_q^T lambda - Q_e| = {err_l:.1e}, lambda = {np.round(lam, 4)}")
    assert err_l < 1e-10
    for model, (q, qd) in ((four, (q4, qd4)), (chain_model(20), chain_initial_state(20))):
        qdd_qr, qdd_range = (accelerations(model, q, qd, m) for m in FORMULATIONS)
        err_f = np.abs(qdd_qr - qdd_range).max() / np.abs(qdd_qr).max()
        print(f"n={q.size}: QR and range-space qdd agree to {err_f:.1e} (relative)")
        assert err_f < 1e-10
    cases = [("four-bar", four, q4, qd4)]
    cases += [(f"chain N={n}", chain_model(n), *chain_initial_state(n)) for n in (5, 20, 50)]
    for name, model, q0, qd0 in cases:
        start = time.perf_counter()
        y, nfev, steps, ok = simulate(model, q0, qd0, 10.0, rtol=1e-8, atol=1e-8)
        wall = time.perf_counter() - start
        drift = np.abs(constraints(model, y[: q0.size])).max()
        print(
            f"{name:12s} t1=10 s: steps={steps:6d} nfev={nfev:7d} wall={wall:7.2f} s "
            f"success={ok} |Phi(t1)|={drift:.1e}"
        )


if __name__ == "__main__":
    _self_check()
