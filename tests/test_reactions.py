"""Joint reactions against hand computations, Blajer's physical reactions (schemes 35, 37,
38) and the solvability analysis of the redundant four-bar."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

import jaxmbs
from jaxmbs import cli
from jaxmbs.analysis.reactions import SCHEMES
from jaxmbs.model.joints import planar
from jaxmbs.models import chain, fourbar, pendulum

G = 9.81


def cross(a, b):
    return a[0] * b[1] - a[1] * b[0]


def state_reactions(mech, t, q, qd):
    qdd, lam = jaxmbs.accelerations_and_multipliers(mech, q, qd, t)
    return qdd, jaxmbs.constraint_reactions(mech, q, lam, t)


# --- statics and a pendulum released from rest ------------------------------------------


def pendulum_pivot_force(m, J, rho, gamma):
    """Force of the pivot on a pendulum released from rest with its centre of mass at angle
    γ: γ̈ = −m g ρ cos γ / (J + m ρ²), a_G = γ̈ ρ (−sin γ, cos γ), F = m a_G + (0, m g)."""
    gamma_dd = -m * G * rho * np.cos(gamma) / (J + m * rho**2)
    a_g = gamma_dd * rho * np.array([-np.sin(gamma), np.cos(gamma)])
    return m * a_g + np.array([0.0, m * G])


@pytest.mark.parametrize("amplitude", [0.0, 0.9])
def test_physical_pendulum_pivot(amplitude):
    mech = pendulum.physical_pendulum(m=2.0, J=0.07, rho=0.35, g=G)
    q, qd = pendulum.initial_state(mech, amplitude)
    _, r = state_reactions(mech, 0.0, q, qd)
    # The pivot's generalized reaction f = C_Xᵀλ_X is minus the force on the body.
    expected = pendulum_pivot_force(2.0, 0.07, 0.35, -np.pi / 2 + amplitude)
    assert_close(-r.groups["pivot"][:2], expected, 0, 1e-10, "pivot force")
    assert_close(r.generalized, r.groups["pivot"], 0, 1e-12, "single group")


@pytest.mark.parametrize("amplitude", [0.0, 1.2])
def test_planar_pin_joint_terms(amplitude):
    """A one-link chain: the revolute's `force` is the pin's force on the link."""
    mech = chain.chain(1, length=0.8, mass=1.5, g=G)
    q, qd = chain.initial_state(mech, amplitude)
    _, r = state_reactions(mech, 0.0, q, qd)
    gamma = -np.pi / 2 + amplitude  # direction of the centre of mass seen from the pin
    expected = pendulum_pivot_force(1.5, 1.5 * 0.8**2 / 12, 0.4, gamma)
    assert_close(r.joints["J0"]["force"], expected, 0, 1e-10, "pin force")
    phi = float(q[2])
    local = np.array([[np.cos(phi), np.sin(phi)], [-np.sin(phi), np.cos(phi)]]) @ expected
    assert_close(r.joints["J0"]["force_local"], local, 0, 1e-10, "pin force, body frame")


def test_parallelogram_at_rest_in_the_rectangle():
    """Crank and rocker vertical, coupler horizontal: an equilibrium under gravity. The
    coupler hangs on B and C with m₂g/2 each; crank and rocker are columns."""
    p = {"l0": 0.5, "l1": 0.2, "l2": 0.5, "l3": 0.2, "m1": 1.0, "m2": 2.0, "m3": 1.5}
    mech = fourbar.fourbar(**p)
    q, qd = fourbar.initial_state(mech, np.pi / 2, 0.0)
    assert_close(q[3:5], [0.25, 0.2], 0, 1e-12, "rectangle")
    qdd, r = state_reactions(mech, 0.0, q, qd)
    assert_close(qdd, np.zeros(9), 0, 1e-10, "equilibrium")
    half = p["m2"] * G / 2
    expected = {
        "A": [0.0, p["m1"] * G + half],  # ground on crank
        "B": [0.0, -half],  # coupler on crank
        "C": [0.0, half],  # rocker on coupler
        "D": [0.0, p["m3"] * G + half],  # ground on rocker
    }
    for name, force in expected.items():
        assert_close(r.joints[name]["force"], force, 0, 1e-10, f"joint {name}")


def locked_fourbar(angle):
    """The reference four-bar with its crank locked by a driving constraint."""
    mech = fourbar.fourbar()
    bodies = [
        planar.Body("crank", "m1", lambda p: p["m1"] * p["l1"] ** 2 / 12),
        planar.Body("coupler", "m2", lambda p: p["m2"] * p["l2"] ** 2 / 12),
        planar.Body("rocker", "m3", lambda p: p["m3"] * p["l3"] ** 2 / 12),
    ]
    joints = list(planar.joints_of(mech)) + [planar.Driving("lock", 2, lambda t, p: angle)]
    q, _ = fourbar.initial_state(mech, angle, 0.0)
    locked = planar.planar_mechanism(
        bodies, joints, mech.params, gravity=lambda p: (0.0, -p["g"]), reference_q=q
    )
    return locked, q


def test_locked_fourbar_statics_against_free_body_diagrams():
    angle = 1.1
    mech, q = locked_fourbar(angle)
    qdd, r = state_reactions(mech, 0.0, q, jnp.zeros(9))
    assert_close(qdd, np.zeros(9), 0, 1e-10, "at rest")
    # Independent Newton–Euler statics: unknowns F_A, F_B, F_C, F_D (2 each) and τ.
    p = {k: float(v) for k, v in mech.params.items()}
    qn = np.asarray(q)
    c = [qn[3 * k : 3 * k + 2] for k in range(3)]
    A, D = np.zeros(2), np.array([p["l0"], 0.0])
    B = A + p["l1"] * np.array([np.cos(qn[2]), np.sin(qn[2])])
    C = D + p["l3"] * np.array([np.cos(qn[8]), np.sin(qn[8])])
    K = np.zeros((9, 9))
    rhs = np.zeros(9)
    # crank: F_A + F_B = −m1 g; (A−c1)×F_A + (B−c1)×F_B + τ = 0
    K[0:2, 0:2] = K[0:2, 2:4] = np.eye(2)
    K[2, 0:2] = [-(A - c[0])[1], (A - c[0])[0]]
    K[2, 2:4] = [-(B - c[0])[1], (B - c[0])[0]]
    K[2, 8] = 1.0
    # coupler: −F_B + F_C = −m2 g; (B−c2)×(−F_B) + (C−c2)×F_C = 0
    K[3:5, 2:4], K[3:5, 4:6] = -np.eye(2), np.eye(2)
    K[5, 2:4] = [(B - c[1])[1], -(B - c[1])[0]]
    K[5, 4:6] = [-(C - c[1])[1], (C - c[1])[0]]
    # rocker: −F_C + F_D = −m3 g; (C−c3)×(−F_C) + (D−c3)×F_D = 0
    K[6:8, 4:6], K[6:8, 6:8] = -np.eye(2), np.eye(2)
    K[8, 4:6] = [(C - c[2])[1], -(C - c[2])[0]]
    K[8, 6:8] = [-(D - c[2])[1], (D - c[2])[0]]
    rhs[[1, 4, 7]] = [p["m1"] * G, p["m2"] * G, p["m3"] * G]
    x = np.linalg.solve(K, rhs)
    for k, name in enumerate("ABCD"):
        assert_close(r.joints[name]["force"], x[2 * k : 2 * k + 2], 0, 1e-10, f"joint {name}")
    assert_close(r.joints["lock"]["force"], x[8], 0, 1e-10, "holding torque")
    assert_close(r.generalized, sum(r.groups.values()), 0, 1e-12, "Σ f_X = f")


def test_reaction_gradient_by_finite_differences():
    """d(holding torque, joint C force)/d(coupler mass) by autodiff and central differences."""
    mech, q = locked_fourbar(1.1)

    def outputs(m2):
        params = {**mech.params, "m2": m2}
        _, lam = jaxmbs.accelerations_and_multipliers(mech, q, jnp.zeros(9), 0.0, params)
        joints = jaxmbs.constraint_reactions(mech, q, lam, 0.0, params).joints
        return jnp.append(joints["C"]["force"], joints["lock"]["force"])

    m2, h = 2.0, 1e-4
    grad = jax.jacfwd(outputs)(m2)
    fd = (outputs(m2 + h) - outputs(m2 - h)) / (2 * h)
    assert float(jnp.max(jnp.abs(grad))) > 1.0
    assert_close(grad, fd, 1e-7, 1e-9, "d reactions / d m2")


# --- Blajer et al. 1994, §5–6: the four-bar in relative coordinates ------------------------


def blajer_fourbar():
    """q = [α1, α2, α3] (link k along (sin θk, cos θk), θk = α1 + … + αk), cut at O4 and
    closed by the closing conditions α2 = g2(α1), α3 = g3(α1) (eqs 29, 40): Ĉ = [−A I]
    (eq 31), so λ̂ are not physical reactions."""
    params = {**fourbar.DEFAULTS}

    def joints(q, p):
        theta = jnp.cumsum(q)
        u = jnp.stack([jnp.sin(theta), jnp.cos(theta)], axis=1)
        links = jnp.stack([p["l1"], p["l2"], p["l3"]])[:, None] * u
        return jnp.concatenate([jnp.zeros((1, 2)), jnp.cumsum(links, axis=0)])  # O1..O4

    def kinetic(q, qd, p):
        mid = lambda q_: 0.5 * (joints(q_, p)[:-1] + joints(q_, p)[1:])  # noqa: E731
        _, v = jax.jvp(mid, (q,), (qd,))
        m = jnp.stack([p["m1"], p["m2"], p["m3"]])
        J = m * jnp.stack([p["l1"], p["l2"], p["l3"]]) ** 2 / 12
        return 0.5 * jnp.sum(m * jnp.sum(v**2, axis=1)) + 0.5 * jnp.sum(J * jnp.cumsum(qd) ** 2)

    def potential(q, p):
        mid = 0.5 * (joints(q, p)[:-1] + joints(q, p)[1:])
        return p["g"] * jnp.sum(jnp.stack([p["m1"], p["m2"], p["m3"]]) * mid[:, 1])

    def closing(t, q, p):
        a1 = q[0]
        l0, l1, l2, l3 = p["l0"], p["l1"], p["l2"], p["l3"]
        cos3 = (l0**2 + l1**2 - l2**2 - l3**2 - 2 * l0 * l1 * jnp.sin(a1)) / (2 * l2 * l3)
        a3 = -jnp.arccos(cos3)  # eq 40, the branch with O3 above the ground line
        w = jnp.array([l0 - l1 * jnp.sin(a1), -l1 * jnp.cos(a1)])  # O4 − O2
        # l2 U(β) + l3 U(β + α3) = O4 − O2 with U(θ) = sin θ + i cos θ = i e^{−iθ}:
        beta = jnp.pi / 2 + jnp.arctan2(-l3 * jnp.sin(a3), l2 + l3 * jnp.cos(a3))
        beta = beta - jnp.arctan2(w[1], w[0])
        d2 = q[1] - (beta - a1)
        return jnp.stack([jnp.arctan2(jnp.sin(d2), jnp.cos(d2)), q[2] - a3])

    def distribution(t, q, p):
        """Bᵀ of eq 44: reactions f = [f_x, f_y] at O4 (on the linkage)."""
        a1, a12 = q[0], q[0] + q[1]
        l0, l1, l2 = p["l0"], p["l1"], p["l2"]
        Bt = jnp.array(
            [
                [0.0, -l0],
                [-l1 * jnp.cos(a1), -l0 + l1 * jnp.sin(a1)],
                [-l1 * jnp.cos(a1) - l2 * jnp.cos(a12), -l0 + l1 * jnp.sin(a1) + l2 * jnp.sin(a12)],
            ]
        )
        return Bt.T

    mech = jaxmbs.Mechanism.from_lagrangian(
        kinetic, potential, closing, params=params, n=3, constraint_groups={"closing": (0, 1)}
    )
    return mech, joints, distribution


def to_absolute(joints, q, p):
    """Absolute coordinates of `fourbar.fourbar()` (centres, link angles) from α."""
    O = joints(q, p)
    angle = lambda v: jnp.arctan2(v[1], v[0])  # noqa: E731
    return jnp.concatenate(
        [
            jnp.append((O[0] + O[1]) / 2, angle(O[1] - O[0])),
            jnp.append((O[1] + O[2]) / 2, angle(O[2] - O[1])),
            jnp.append((O[2] + O[3]) / 2, angle(O[2] - O[3])),  # rocker: from O4 towards O3
        ]
    )


@pytest.fixture(scope="module")
def blajer_state():
    mech, joints, distribution = blajer_fourbar()
    guess = jnp.array([0.5, 2.0, -2.0])
    q0, _ = jaxmbs.assemble(mech, guess, fixed=(0,))
    q, qd = jaxmbs.assemble(mech, q0, jnp.array([3.0, 0.0, 0.0]), fixed=(0,))
    return mech.with_structure(q), joints, distribution, q, qd


def test_blajer_schemes_agree_and_match_the_absolute_model(blajer_state):
    mech, joints, distribution, q, qd = blajer_state
    p = mech.params
    assert float(jnp.max(jnp.abs(joints(q, p)[-1] - jnp.array([p["l0"], 0.0])))) < 1e-12
    f = {s: jaxmbs.physical_reactions(mech, q, qd, distribution, 0.0, scheme=s) for s in SCHEMES}
    scale = float(jnp.max(jnp.abs(f[37])))
    assert scale > 1.0
    assert_close(f[35], f[37], 0, 1e-10 * scale, "scheme 35 vs 37")
    assert_close(f[38], f[37], 0, 1e-10 * scale, "scheme 38 vs 37")
    # The closing-condition multipliers λ̂ are not the physical reactions (§5): Ĉᵀλ̂ = Bᵀf.
    qdd, lam_hat = jaxmbs.accelerations_and_multipliers(mech, q, qd, 0.0)
    C_hat = jaxmbs.constraint_jacobian(mech, q, 0.0, p)
    assert_close(-C_hat.T @ lam_hat, distribution(0.0, q, p).T @ f[37], 0, 1e-10 * scale, "eq 32")
    assert float(jnp.max(jnp.abs(jnp.abs(lam_hat) - jnp.abs(f[37])))) > 0.1 * scale
    # Independent check: the same linkage in absolute coordinates, reaction of joint D.
    absolute = fourbar.fourbar()
    x, xd = jax.jvp(lambda a: to_absolute(joints, a, p), (q,), (qd,))
    assert (
        float(jnp.max(jnp.abs(jaxmbs.position_residual(absolute, x, 0.0, absolute.params)))) < 1e-12
    )
    _, r = state_reactions(absolute, 0.0, x, xd)
    assert_close(r.joints["D"]["force"], f[37], 0, 1e-9 * scale, "O4 reaction vs joint D")


def test_bad_input(blajer_state):
    mech, _, distribution, q, qd = blajer_state
    with pytest.raises(ValueError, match="scheme must be one of"):
        jaxmbs.physical_reactions(mech, q, qd, distribution, 0.0, scheme=36)
    with pytest.raises(ValueError, match=r"shape \(rank C, n\) = \(2, 3\)"):
        jaxmbs.physical_reactions(mech, q, qd, jnp.ones((3, 3)), 0.0)
    with pytest.raises(ValueError, match=r"multipliers in \(2,\)"):
        jaxmbs.constraint_reactions(mech, q, jnp.zeros(3), 0.0)
    with pytest.raises(ValueError, match="finite configuration of shape"):
        jaxmbs.analyze_solvability(mech, q[:2])


# --- solvability --------------------------------------------------------------------------


def test_redundant_fourbar_solvability_and_elimination():
    """The distance AB duplicates the crank: A, B and AB share a self-stress (not unique),
    C and D do not. Eliminating AB or one crank row moves load between A, B and AB only."""
    mech = fourbar.fourbar(redundant=True)
    q, qd = fourbar.initial_state(mech, 0.8, -2.0)
    report = jaxmbs.analyze_solvability(mech, q)
    assert (report.rank, report.redundancy, report.dof) == (8, 1, 1)
    assert report.solvable == {"A": False, "B": False, "C": True, "D": True, "AB": False}
    assert report.consistent
    out = {"min-norm": jaxmbs.accelerations_and_multipliers(mech, q, qd, 0.0)}
    for drop in (8, 2):  # the distance row; the x row of joint B
        method = jaxmbs.eliminate_rows(mech, (drop,), q)
        out[drop] = jaxmbs.accelerations_and_multipliers(mech, q, qd, 0.0, method=method)
        lam = out[drop][1]
        assert abs(float(lam[drop])) <= 1e-14 * float(jnp.max(jnp.abs(lam)))  # eliminated row
    r = {k: jaxmbs.constraint_reactions(mech, q, lam, 0.0) for k, (_, lam) in out.items()}
    for k in (8, 2):
        assert_close(out[k][0], out["min-norm"][0], 0, 1e-10, "q̈")
        assert_close(r[k].generalized, r["min-norm"].generalized, 0, 1e-10, "Cᵀλ")
        for name in ("C", "D"):
            assert_close(r[k].groups[name], r["min-norm"].groups[name], 0, 1e-10, name)
    for name in ("A", "B", "AB"):
        diff = np.max(np.abs(r[8].groups[name] - r[2].groups[name]))
        assert diff > 1e-3 * np.max(np.abs(r[8].groups["A"])), name


def test_elimination_rejects_bad_choices():
    mech = fourbar.fourbar(redundant=True)
    q, _ = fourbar.initial_state(mech)
    with pytest.raises(ValueError, match="redundancy is p = 1"):
        jaxmbs.eliminate_rows(mech, (2, 8), q)
    with pytest.raises(ValueError, match="dependent"):
        jaxmbs.eliminate_rows(mech, (6,), q)  # joint D's x row is needed
    with pytest.raises(ValueError, match="distinct rows"):
        jaxmbs.eliminate_rows(mech, (9,), q)


def test_analyze_command(capsys):
    assert cli.main(["analyze", "fourbar-redundant", "--matrices"]) == 0
    text = capsys.readouterr().out
    assert "redundancy p = 1" in text and "non-unique reactions: A, B, AB" in text
    assert "| C | holonomic | 4,5 | 2 |" in text and "B_AB" in text


def test_analyze_in_float32(float32):
    mech = fourbar.fourbar(redundant=True)
    q, _ = fourbar.initial_state(mech, 0.8)
    assert q.dtype == jnp.float32
    report = jaxmbs.analyze_solvability(mech, q)
    assert report.solvable == {"A": False, "B": False, "C": True, "D": True, "AB": False}
    assert report.consistent
