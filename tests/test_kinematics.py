"""Autodiff kinematics (C, Γ) against finite differences; knife-edge (Pfaffian) constraints;
Lagrangian form; structure analysis."""

import jax
import jax.numpy as jnp
import numpy as np
from helpers import assert_close

import jaxmbs
from jaxmbs.model.joints import planar
from jaxmbs.models import slider_crank

SEED = 7  # every test draws from its own generator with this seed


def test_jacobian_and_gamma_by_finite_differences():
    """Rheonomic case (driven slider-crank): Φ_t and Φ_tt terms must be in c and Γ."""
    mech = slider_crank.slider_crank(driven=True)
    p = mech.params
    t = 0.37
    rng = np.random.default_rng(SEED)
    q = jnp.asarray(rng.normal(size=9))
    qd = jnp.asarray(rng.normal(size=9))
    a = jnp.asarray(rng.normal(size=9))
    C = jaxmbs.constraint_jacobian(mech, q, t, p)
    h = 1e-6
    fd = jnp.stack(
        [
            (
                jaxmbs.position_residual(mech, q + h * e, t, p)
                - jaxmbs.position_residual(mech, q - h * e, t, p)
            )
            / (2 * h)
            for e in jnp.eye(9)
        ],
        axis=1,
    )
    assert_close(C, fd, 0, 1e-8, "Φ_q")
    # c = Φ_q q̇ + Φ_t: compare with d/dt Φ(t, q + t q̇).
    phi_dot = (
        jaxmbs.position_residual(mech, q + h * qd, t + h, p)
        - jaxmbs.position_residual(mech, q - h * qd, t - h, p)
    ) / (2 * h)
    assert_close(jaxmbs.velocity_residual(mech, q, qd, t, p), phi_dot, 0, 1e-8, "Φ̇")

    # Along q(τ) = q + τ q̇ + τ²/2 a: dc/dτ = C a − Γ.
    def c_along(tau):
        return jaxmbs.velocity_residual(
            mech, q + tau * qd + tau**2 / 2 * a, qd + tau * a, t + tau, p
        )

    c_dot = (c_along(h) - c_along(-h)) / (2 * h)
    gamma = jaxmbs.acceleration_rhs(mech, q, qd, t, p)
    assert_close(C @ a - gamma, c_dot, 0, 1e-7, "Γ")
    # Φ and c as the primal outputs of the jvps that give Γ: the same values.
    phi_, c_, gamma_ = jaxmbs.kinematics.residuals_and_gamma(mech, q, qd, t, p)
    assert float(jnp.max(jnp.abs(jaxmbs.position_residual(mech, q, t, p)))) > 0.1  # off Φ = 0
    assert_close(phi_, jaxmbs.position_residual(mech, q, t, p), 0, 1e-14, "Φ from the jvp")
    assert_close(c_, jaxmbs.velocity_residual(mech, q, qd, t, p), 0, 1e-14, "c from the jvp")
    assert_close(gamma_, gamma, 0, 1e-14, "Γ")


def sleigh():
    """A body on a horizontal plane with a knife edge behind its centre (Chaplygin sleigh)."""
    bodies = [planar.Body("sleigh", "m", "J")]
    joints = [planar.KnifeEdge("blade", 0, (-0.3, 0.0), (1.0, 0.0))]
    return planar.planar_mechanism(
        bodies,
        joints,
        {"m": 2.0, "J": 0.2},
        gravity=(0.0, 0.0),
        reference_q=np.array([0.1, 0.2, 0.3]),
    )


def test_knife_edge_structure_and_motion():
    mech = sleigh()
    s = mech.structure
    assert (s.n_holonomic, s.n_pfaffian, s.rank, s.dof, s.redundancy) == (0, 1, 1, 2, 0)
    q0, qd0 = jaxmbs.assemble(mech, jnp.array([0.0, 0.0, 0.3]), jnp.array([1.0, 0.5, 2.0]))
    assert float(jnp.abs(jaxmbs.velocity_residual(mech, q0, qd0, 0.0, mech.params)[0])) < 1e-14
    for method in ("kkt", "qr"):
        sol = jaxmbs.simulate(
            mech,
            q0,
            qd0,
            (0.0, 5.0),
            saveat=jnp.linspace(0, 5, 51),
            method=method,
            rtol=1e-10,
            atol=1e-10,
        )
        assert float(jnp.max(sol.velocity_residual)) <= 1e-10
        energy = jax.vmap(mech.energy)(sol.q, sol.qd)  # no potential: kinetic energy only
        assert float(jnp.max(jnp.abs(energy / energy[0] - 1))) < 1e-8
        # The blade's lateral reaction is not zero: the constraint really acts.
        assert float(jnp.max(jnp.abs(sol.multipliers))) > 0.1
        # The sleigh's angular velocity decays to zero (known behaviour), it keeps moving.
        assert abs(float(sol.qd[-1, 2])) < 0.2 * abs(float(qd0[2]))


def test_lagrangian_form_matches_explicit_mass_matrix():
    """Pendulum in polar-like coordinates q = [x, y] via T and V: M and Q by autodiff."""

    def kinetic(q, qd, p):
        return 0.5 * p["m"] * qd @ qd + 0.5 * p["J"] * (q[0] * qd[1] - q[1] * qd[0]) ** 2 / (q @ q)

    def potential(q, p):
        return p["m"] * p["g"] * q[1]

    params = {"m": 1.5, "J": 0.2, "g": 9.81}
    mech = jaxmbs.Mechanism.from_lagrangian(kinetic, potential, params=params, n=2)
    q = jnp.array([0.3, -0.4])
    qd = jnp.array([0.7, 0.2])
    r2 = q @ q
    u = jnp.array([-q[1], q[0]]) / jnp.sqrt(r2)
    M_exact = params["m"] * jnp.eye(2) + params["J"] * jnp.outer(u, u)
    assert_close(mech.mass_matrix(q, params), M_exact, 0, 1e-14, "M")
    # Q = ∂T/∂q − (∂²T/∂q̇∂q) q̇ − ∂V/∂q checked by Lagrange's equations at a random q̈.
    qdd = jnp.array([0.1, -0.3])
    dT_dqd = jax.grad(kinetic, argnums=1)
    h = 1e-6
    d_dt = (
        dT_dqd(q + h * qd + h**2 / 2 * qdd, qd + h * qdd, params)
        - dT_dqd(q - h * qd + h**2 / 2 * qdd, qd - h * qdd, params)
    ) / (2 * h)
    lagrange = d_dt - jax.grad(kinetic)(q, qd, params) + jax.grad(potential)(q, params)
    residual = mech.mass_matrix(q, params) @ qdd - mech.forces(0.0, q, qd, params)
    assert_close(residual, lagrange, 0, 1e-7, "Lagrange's equations")


def test_kinetic_completion_equals_lagrange_by_autodiff():
    """`KineticCompletion`'s closed form (M_c = RᵀWR, Q_c = −RᵀW(Ṙq̇)) against the same
    T_c = ½ ṙᵀWṙ given to `from_lagrangian` as kinetic energy (its terms by autodiff), at a
    state where the rows' rates do not vanish (the two terms that cancel in the closed form
    are nonzero there): M, M v and Q agree to rounding; with the sign of Q_c flipped Q is off
    by its own size."""

    def rows(q, p):
        return jnp.stack([jnp.sin(q[0]) * q[1], q[0] ** 2 + jnp.cos(q[1]) * q[2]])

    def weights(p):
        return jnp.stack([p["a"], 2.0 * p["a"]])

    def base(q, qd, p):
        return 0.5 * qd @ qd

    def completed(q, qd, p):
        rate = jax.jvp(lambda x: rows(x, p), (q,), (qd,))[1]
        return base(q, qd, p) + 0.5 * rate @ (weights(p) * rate)

    params = {"a": 0.7}
    closed = jaxmbs.Mechanism.from_lagrangian(
        base, params=params, n=3, completions=[jaxmbs.model.KineticCompletion(rows, weights)]
    )
    autodiff = jaxmbs.Mechanism.from_lagrangian(completed, params=params, n=3)
    q, qd, v = jnp.array([0.3, -1.1, 0.8]), jnp.array([0.9, 0.4, -1.3]), jnp.array([1.0, 2.0, 3.0])
    rate = jax.jvp(lambda x: rows(x, params), (q,), (qd,))[1]
    assert float(jnp.min(jnp.abs(rate))) > 0.1  # off the rows' velocity manifold
    M = autodiff.mass_matrix(q, params)
    assert_close(closed.mass_matrix(q, params), M, 0, 1e-14, "M")
    assert_close(closed.mass_product(q, v, params), M @ v, 0, 1e-14, "M v")
    Q = autodiff.forces(0.0, q, qd, params)
    assert float(jnp.max(jnp.abs(Q))) > 0.5
    assert_close(closed.forces(0.0, q, qd, params), Q, 0, 1e-14, "Q")
    completion = jaxmbs.model.KineticCompletion(rows, weights)
    assert float(jnp.max(jnp.abs(Q + 2 * completion.force(q, qd, params)))) > 0.5


def test_forces_at_rest_equal_the_forces_at_zero_velocity():
    """`from_lagrangian`'s forces at rest (velocity terms left out) against its Q(t, q, 0, p),
    on a T with every kind of part: quadratic in q̇ with M(q), gyroscopic (linear in q̇), one
    without q̇ (a rotating frame's ½ m ω² r², whose ∂T/∂q stays at rest), a completion, a
    potential and a damped external force. Each part acts at the state used (at rest Q is
    nonzero, and away from rest the velocity terms are); a mechanism without `rest_forces`
    gives the forces at q̇ = 0."""

    def rows(q, p):
        return jnp.stack([jnp.sin(q[0]) * q[1]])

    def kinetic(q, qd, p):
        M = jnp.diag(jnp.array([1.0 + q[1] ** 2, 2.0, 1.5 + jnp.cos(q[0])]))
        gyroscopic = p["w"] * (q[0] * qd[1] - q[1] * qd[0])
        frame = 0.5 * p["w"] ** 2 * (q[0] ** 2 + q[1] ** 2)
        return 0.5 * qd @ M @ qd + gyroscopic + frame

    def potential(q, p):
        return p["k"] * (q[2] - 0.2) ** 2 + jnp.cos(q[0])

    def external(t, q, qd, p):
        return -p["c"] * qd + jnp.array([0.0, jnp.sin(t), 0.3])

    params = {"w": 1.3, "k": 2.0, "c": 0.4}
    mech = jaxmbs.Mechanism.from_lagrangian(
        kinetic, potential, params=params, n=3, external_forces=external,
        completions=[jaxmbs.model.KineticCompletion(rows, lambda p: jnp.array([0.8]))],
    )  # fmt: skip
    q, qd, t = jnp.array([0.4, -0.7, 1.1]), jnp.array([0.9, -1.2, 0.5]), 0.6
    at_rest = mech.forces(t, q, jnp.zeros(3), params)
    assert float(jnp.min(jnp.abs(at_rest))) > 0.1
    assert float(jnp.max(jnp.abs(mech.forces(t, q, qd, params) - at_rest))) > 0.5
    assert_close(mech.rest_forces(t, q, params), at_rest, 0, 1e-14, "Q at rest")
    assert_close(mech.forces_at_rest(t, q, params), at_rest, 0, 1e-14, "Q at rest")
    frame = 1.3**2 * q[:2]  # ∂T/∂q at rest: without it the first two rows are off by it
    assert float(jnp.min(jnp.abs(frame))) > 0.5
    plain = jaxmbs.Mechanism(mech.mass_matrix, mech.forces, params=params, n=3)
    assert plain.rest_forces is None
    assert_close(plain.forces_at_rest(t, q, params), at_rest, 0, 1e-14, "Q at rest, default")


def test_duplicated_row_is_found_redundant():
    bodies = [planar.Body("link", 1.0, 0.1)]
    pin = planar.Revolute("pin", 0, (-0.5, 0.0))
    copy = planar.Revolute("pin-copy", 0, (-0.5, 0.0))
    mech = planar.planar_mechanism(bodies, [pin, copy], reference_q=np.array([0.5, 0.0, 0.0]))
    s = mech.structure
    assert (s.rank, s.redundancy, s.dof) == (2, 2, 1)
    assert len(s.independent_rows) == 2 and s.dependent_rows == (2, 3)
