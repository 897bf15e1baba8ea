"""Plain NumPy/SciPy McPherson struts: the baseline of `experiments/mcpherson_comparison.py`.

The same two struts as `jaxmbs.models.mcpherson` (same hardpoints, bodies, loads), written
the classic way, independently of jaxmbs: absolute coordinates with ZXZ Euler angles, the
constraint Jacobian Φ_q and the acceleration term Γ assembled from hand-derived first and
second derivatives of the rotation matrix, the mass matrix M = diag(m I, GᵀJG) and the
gyroscopic forces −Gᵀ(JĠė + ω'×Jω') from the body angular-velocity matrix G (ω' = G ė),
solved by the QR method with column pivoting (Pękal–Frączek 2016, eqs 3.29–3.36) and
integrated with `scipy.integrate.solve_ivp` (RK45).

Every constraint row is either a component of a point difference P_i − P_j or a dot product
u·w of body-fixed vectors (or of a vector and a point difference); for a body-fixed quantity
x with Jacobian X, ẍ = X q̈ + x̂ with x̂ = Σ ∂²x/∂eₖ∂eₗ ėₖėₗ, so Γ = −x̂ for a point row and
Γ = −(ûw + 2u̇·ẇ + u·ŵ) for a dot row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp
from scipy.linalg import cho_factor, cho_solve, qr, solve_triangular

from jaxmbs.models import mcpherson as design  # geometry data only: hardpoints, body frame

N_BODIES = 5
N = 6 * N_BODIES


def _rz(a: float, order: int = 0) -> np.ndarray:
    """R_z(a) or its first/second derivative."""
    c, s = np.cos(a), np.sin(a)
    if order == 0:
        return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    if order == 1:
        return np.array([[-s, -c, 0.0], [c, -s, 0.0], [0.0, 0.0, 0.0]])
    return np.array([[-c, s, 0.0], [-s, -c, 0.0], [0.0, 0.0, 0.0]])


def _rx(a: float, order: int = 0) -> np.ndarray:
    """R_x(a) or its first/second derivative."""
    c, s = np.cos(a), np.sin(a)
    if order == 0:
        return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])
    if order == 1:
        return np.array([[0.0, 0.0, 0.0], [0.0, -s, -c], [0.0, c, -s]])
    return np.array([[0.0, 0.0, 0.0], [0.0, -c, s], [0.0, -s, -c]])


def rotation_derivatives(e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A = R_z(φ)R_x(θ)R_z(ψ), ∂A/∂eₖ (3, 3, 3) and ∂²A/∂eₖ∂eₗ (3, 3, 3, 3)."""
    factors = (_rz, _rx, _rz)
    d1 = np.empty((3, 3, 3))
    d2 = np.empty((3, 3, 3, 3))
    for k in range(3):
        for m in range(3):
            orders = [0, 0, 0]
            orders[k] += 1
            orders[m] += 1
            mats = [f(e[i], orders[i]) for i, f in enumerate(factors)]
            d2[k, m] = mats[0] @ mats[1] @ mats[2]
        orders = [0, 0, 0]
        orders[k] = 1
        mats = [f(e[i], orders[i]) for i, f in enumerate(factors)]
        d1[k] = mats[0] @ mats[1] @ mats[2]
    A = _rz(e[0]) @ _rx(e[1]) @ _rz(e[2])
    return A, d1, d2


def angular_velocity_matrix(e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """G with ω' = G ė (body frame, ZXZ), and ∂G/∂θ, ∂G/∂ψ."""
    st, ct = np.sin(e[1]), np.cos(e[1])
    sp, cp = np.sin(e[2]), np.cos(e[2])
    G = np.array([[st * sp, cp, 0.0], [st * cp, -sp, 0.0], [ct, 0.0, 1.0]])
    G_theta = np.array([[ct * sp, 0.0, 0.0], [ct * cp, 0.0, 0.0], [-st, 0.0, 0.0]])
    G_psi = np.array([[st * cp, -sp, 0.0], [-st * sp, -cp, 0.0], [0.0, 0.0, 0.0]])
    return G, G_theta, G_psi


@dataclass
class Quantity:
    """A vector x (3,), its Jacobian X (3, n), and the velocity-quadratic part x̂ of ẍ."""

    value: np.ndarray
    jac: np.ndarray
    quad: np.ndarray

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, self.jac - other.jac, self.quad - other.quad)


class Kinematics:
    """Rotation matrices and their derivatives of all bodies at (q, q̇)."""

    def __init__(self, q: np.ndarray, qd: np.ndarray):
        self.qd = qd
        self.frames = [rotation_derivatives(q[6 * b + 3 : 6 * b + 6]) for b in range(N_BODIES)]
        self.q = q

    def vector(self, body: int | None, local: np.ndarray) -> Quantity:
        """Body-fixed vector A s (ground: constant)."""
        jac = np.zeros((3, N))
        if body is None:
            return Quantity(np.asarray(local, float), jac, np.zeros(3))
        A, d1, d2 = self.frames[body]
        rates = self.qd[6 * body + 3 : 6 * body + 6]
        jac[:, 6 * body + 3 : 6 * body + 6] = (d1 @ local).T
        quad = np.einsum("klij,j,k,l->i", d2, local, rates, rates)
        return Quantity(A @ local, jac, quad)

    def point(self, body: int | None, local: np.ndarray) -> Quantity:
        """Point r + A s (ground: constant)."""
        x = self.vector(body, local)
        if body is not None:
            x.value = x.value + self.q[6 * body : 6 * body + 3]
            x.jac[:, 6 * body : 6 * body + 3] = np.eye(3)
        return x


def dot_row(u: Quantity, w: Quantity, qd: np.ndarray) -> tuple[float, np.ndarray, float]:
    """Row f = u·w: value, Jacobian row, Γ = −(ûw + 2u̇·ẇ + u·ŵ)."""
    jac = w.value @ u.jac + u.value @ w.jac
    gamma = -(u.quad @ w.value + 2 * (u.jac @ qd) @ (w.jac @ qd) + u.value @ w.quad)
    return u.value @ w.value, jac, gamma


def perpendicular_pair(axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit vectors perpendicular to the axis and to each other."""
    a = axis / np.linalg.norm(axis)
    u = np.cross(a, np.eye(3)[np.argmin(np.abs(a))])
    u /= np.linalg.norm(u)
    return u, np.cross(a, u)


class Strut:
    """The McPherson strut with hand-written constraint rows."""

    def __init__(self, redundant: bool = False):
        hp = design.design_hardpoints()
        self.redundant = redundant
        self.rank = 26
        frame = design.FRAME

        def local(body: str, name: str) -> np.ndarray:
            a, b = design.BODIES[body]
            return frame.T @ (hp[name] - (hp[a] + hp[b]) / 2)

        def unit(a: str, b: str) -> np.ndarray:
            v = hp[b] - hp[a]
            return v / np.linalg.norm(v)

        self.hp = hp
        self.local = local
        self.axis_A = unit("A_a", "A_b")
        self.axis_strut = frame.T @ unit("C", "D")
        self.axis_rod = frame.T @ unit("J", "K")
        self.perp_A = perpendicular_pair(self.axis_A)
        self.perp_strut = perpendicular_pair(self.axis_strut)
        self.perp_rack = (np.array([0.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0]))  # ⟂ y
        self.baumgarte: tuple[float, float] | None = None  # (α, β): Γ̄ = Γ − 2αΦ̇ − β²Φ
        self.mass = np.ones(N_BODIES)
        self.inertia = np.full((N_BODIES, 3), 0.1)
        self.g, self.Fz, self.Fy = 9.80665, 40.0, 0.1

    def rows(self, q: np.ndarray, qd: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Φ, Φ_q and Γ."""
        k, hp, loc = Kinematics(q, qd), self.hp, self.local
        values, jacs, gammas = [], [], []

        def points(x: Quantity) -> None:
            values.extend(x.value)
            jacs.extend(x.jac)
            gammas.extend(-x.quad)

        def dots(u: Quantity, w: Quantity) -> None:
            f, jac, gamma = dot_row(u, w, qd)
            values.append(f)
            jacs.append(jac)
            gammas.append(gamma)

        arm, strut, rod, tie, rack = range(5)
        if self.redundant:
            points(k.point(arm, loc("arm", "A_a")) - k.point(None, hp["A_a"]))
            points(k.point(arm, loc("arm", "A_b")) - k.point(None, hp["A_b"]))
        else:
            points(k.point(arm, loc("arm", "A")) - k.point(None, hp["A"]))
            axis = k.vector(arm, design.FRAME.T @ self.axis_A)
            for u in self.perp_A:
                dots(k.vector(None, u), axis)
        points(k.point(arm, loc("arm", "B")) - k.point(strut, loc("strut", "B")))
        d = k.point(rod, loc("piston_rod", "J")) - k.point(strut, loc("strut", "C"))
        perp = [k.vector(strut, u) for u in self.perp_strut]
        for u in perp:
            dots(u, d)
        rod_axis = k.vector(rod, self.axis_rod)
        for u in perp:
            dots(u, rod_axis)
        points(k.point(rod, loc("piston_rod", "K")) - k.point(None, hp["K"]))
        points(k.point(strut, loc("strut", "I")) - k.point(tie, loc("tie_rod", "I")))
        points(k.point(tie, loc("tie_rod", "L")) - k.point(rack, loc("rack", "L")))
        d = k.point(rack, loc("rack", "L")) - k.point(None, hp["L"])
        ground = [k.vector(None, u) for u in self.perp_rack]
        for u in ground:
            dots(u, d)
        rack_axis = k.vector(rack, design.FRAME.T @ np.array([0.0, 1.0, 0.0]))
        for u in ground:
            dots(u, rack_axis)
        dots(ground[1], k.vector(rack, design.FRAME.T @ np.array([0.0, 0.0, 1.0])))
        if self.redundant:
            d = k.point(rod, loc("piston_rod", "D")) - k.point(strut, loc("strut", "C"))
            for u in perp:
                dots(u, d)
        return np.array(values), np.array(jacs), np.array(gammas)

    def mass_and_forces(self, t: float, q: np.ndarray, qd: np.ndarray):
        """M and Q (gravity, F_z, F_y and the gyroscopic terms)."""
        M = np.zeros((N, N))
        Q = np.zeros(N)
        for b in range(N_BODIES):
            i = 6 * b
            M[i : i + 3, i : i + 3] = self.mass[b] * np.eye(3)
            e, rates = q[i + 3 : i + 6], qd[i + 3 : i + 6]
            G, G_theta, G_psi = angular_velocity_matrix(e)
            J = np.diag(self.inertia[b])
            M[i + 3 : i + 6, i + 3 : i + 6] = G.T @ J @ G
            omega = G @ rates
            G_dot = G_theta * rates[1] + G_psi * rates[2]
            Q[i + 3 : i + 6] = -G.T @ (J @ (G_dot @ rates) + np.cross(omega, J @ omega))
            Q[i + 2] -= self.mass[b] * self.g
        Q[2] += self.Fz  # arm centre of mass
        Q[6 * 4 + 1] += self.Fy * np.sin(t)  # rack
        return M, Q

    def solve(self, t: float, q: np.ndarray, qd: np.ndarray):
        """q̈ and C_Iᵀλ_I by the QR method with column pivoting (eqs 3.29–3.36)."""
        phi, C, gamma = self.rows(q, qd)
        if self.baumgarte is not None:
            alpha, beta = self.baumgarte
            gamma = gamma - 2 * alpha * (C @ qd) - beta**2 * phi
        M, Q = self.mass_and_forces(t, q, qd)
        r = self.rank
        Qf, R, perm = qr(C.T, pivoting=True)
        Q1, P = Qf[:, :r], Qf[:, r:]
        R1 = R[:r, :r]
        qdd_p = Q1 @ solve_triangular(R1, gamma[perm[:r]], trans="T")
        reduced = P.T @ M @ P
        vdd = cho_solve(cho_factor(reduced), P.T @ (Q - M @ qdd_p))
        qdd = qdd_p + P @ vdd
        return qdd, Q - M @ qdd

    def rhs(self, t: float, y: np.ndarray) -> np.ndarray:
        return np.concatenate([y[N:], self.solve(t, y[:N], y[N:])[0]])


def simulate(strut: Strut, q0, qd0, t1: float = 10.0, tol: float = 1e-8, t_eval=None):
    """RK45 over (0, t1); returns (solve_ivp result, wall time)."""
    start = time.perf_counter()
    y0 = np.concatenate([q0, qd0])
    res = solve_ivp(strut.rhs, (0.0, t1), y0, rtol=tol, atol=tol, t_eval=t_eval)
    return res, time.perf_counter() - start


if __name__ == "__main__":
    strut = Strut()
    q0 = design.design_configuration()
    phi, C, _ = strut.rows(q0, np.zeros(N))
    print(f"|Φ(design)| = {np.abs(phi).max():.1e}, rank Φ_q = {np.linalg.matrix_rank(C)}")
    res, wall = simulate(strut, q0, np.zeros(N), 1.0)
    print(f"1 s: {res.nfev} RHS evaluations in {wall:.2f} s ({wall / res.nfev * 1e6:.0f} µs each)")
