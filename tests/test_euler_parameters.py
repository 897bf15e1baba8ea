"""Spatial bodies in Euler parameters (issue 28): conversions, the normalisation as a
constraint, and tops against their analytic motion.

Independent references: rotation matrices built from axis and angle (Rodrigues), the
torque-free symmetric top (Euler's equations: the symmetry axis precesses about the constant
angular momentum L at |L|/J₁), the heavy symmetric top (nutation bounds from the roots of
the energy cubic, Goldstein §5.7), and central differences for a parameter derivative.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

import jaxmbs
from jaxmbs.model.joints import orientation, spatial

SEED = 20261125


def axis_angle(axis, angle) -> np.ndarray:
    """Rodrigues: R = I + sin a k̃ + (1 − cos a) k̃², k = axis / |axis|."""
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def test_conversions_round_trip():
    """Matrix → Euler parameters (Shepperd) → matrix, also at half turns (tr A = −1, where
    e₀ = 0 and the naive formula divides by zero); Euler parameters ↔ ZXZ angles; G(e)
    against Aᵀ Ȧ by central differences."""
    rng = np.random.default_rng(SEED)
    matrices = [axis_angle(rng.normal(size=3), rng.uniform(-np.pi, np.pi)) for _ in range(20)]
    matrices += [axis_angle(a, np.pi) for a in ([1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0])]
    matrices += [np.eye(3)]
    for A in matrices:
        e = orientation.euler_parameters(A)
        assert abs(np.linalg.norm(e) - 1) < 1e-15 and e[0] >= 0
        assert_close(orientation.parameter_rotation(jnp.asarray(e)), A, 0, 1e-15, "A(e)")
    assert_close(orientation.euler_parameters(np.eye(3)), [1.0, 0, 0, 0], 0, 0, "identity")
    half_turn = orientation.euler_parameters(axis_angle([0, 1, 0], np.pi))
    assert_close(np.abs(half_turn), [0.0, 0.0, 1.0, 0.0], 0, 1e-15, "half turn about y")

    angles = rng.uniform([-np.pi, 0.1, -np.pi], [np.pi, np.pi - 0.1, np.pi], size=(20, 3))
    e = orientation.zxz_to_euler_parameters(jnp.asarray(angles))
    assert_close(
        orientation.parameter_rotation(e), orientation.rotation(jnp.asarray(angles)), 0, 1e-15
    )
    for sign in (1, -1):  # e and −e: the same angles, modulo 2π
        wrapped = np.angle(np.exp(1j * (orientation.euler_parameters_to_zxz(sign * e) - angles)))
        assert_close(wrapped, 0.0, 0, 1e-13, "ZXZ round trip")

    # ω' = 2 G(e) ė: the vector of Aᵀ Ȧ for a unit e and a tangent ė (eᵀė = 0).
    h = 1e-6
    for unit, v in zip(np.asarray(e[:5]), rng.normal(size=(5, 4)), strict=True):
        v = v - (v @ unit) * unit
        A_dot = (
            orientation.parameter_rotation(jnp.asarray(unit + h * v))
            - orientation.parameter_rotation(jnp.asarray(unit - h * v))
        ) / (2 * h)
        W = np.asarray(orientation.parameter_rotation(jnp.asarray(unit))).T @ np.asarray(A_dot)
        omega = spatial.parameter_angular_velocity(jnp.asarray(unit), jnp.asarray(v))
        assert_close(omega, [W[2, 1], W[0, 2], W[1, 0]], 0, 1e-9, "ω' = 2Gė")
        assert_close(W + W.T, 0.0, 0, 1e-9, "Aᵀ Ȧ skew")

    # A mixed layout reports every body's orientation in all three forms.
    layout = spatial.Layout(("a", "b", "c"), ("zxz", "euler_parameters", "zxz"))
    kinds = layout.orientations
    q = np.concatenate(
        [spatial.pose(rng.normal(size=3), A, k) for A, k in zip(matrices[:3], kinds, strict=True)]
    )
    assert layout.n == q.size == 19 and layout.coordinates(1) == slice(6, 13)
    assert_close(layout.rotations(jnp.asarray(q)), matrices[:3], 0, 1e-15, "rotations")
    A_e = orientation.parameter_rotation(layout.euler_parameters(jnp.asarray(q)))
    assert_close(A_e, matrices[:3], 0, 1e-15, "as Euler parameters")
    A_zxz = orientation.rotation(layout.zxz_angles(jnp.asarray(q)))
    assert_close(A_zxz, matrices[:3], 0, 1e-14, "as ZXZ angles")

    for bad in (2 * np.eye(3), np.diag([1.0, 1.0, -1.0])):
        with pytest.raises(ValueError, match="rotation"):
            orientation.euler_parameters(bad)
    with pytest.raises(ValueError, match="orientation must be one of"):
        spatial.Body("b", 1.0, 1.0, "xyz")
    with pytest.raises(ValueError, match="orientation must be one of"):
        spatial.pose(np.zeros(3), np.eye(3), "quaternion")


# --- the torque-free symmetric top --------------------------------------------------------

#: Transverse and axial moments, initial body angular velocity (body = space at t = 0).
J_T, J_A = 1.0, 0.5
OMEGA0 = np.array([1.0, 0.0, 1.5])
T_END = 20.0
TOL = 1e-12


def free_top(kind: str, q0) -> jaxmbs.Mechanism:
    return spatial.spatial_mechanism(
        [spatial.Body("top", 2.0, (J_T, J_T, J_A), kind)],
        [],
        gravity=(0.0, 0.0, 0.0),
        reference_q=q0,
    )


def initial_rates(kind: str, q_orientation, omega_body) -> np.ndarray:
    """Orientation rates with body angular velocity ω': ė = ½ Gᵀ ω' (unit e: G Gᵀ = I and
    eᵀė = 0) or the solve of ω'(θ, θ̇) = ω' for ZXZ angles."""
    q_orientation = jnp.asarray(q_orientation)
    if kind == spatial.EULER_PARAMETERS:
        return 0.5 * np.asarray(orientation.body_rate_matrix(q_orientation)).T @ omega_body
    G = jax.jacfwd(spatial.body_angular_velocity, argnums=1)(q_orientation, jnp.zeros(3))
    return np.linalg.solve(np.asarray(G), omega_body)


@pytest.fixture(scope="module")
def free_top_run():
    """20 s of the top started at the identity orientation (the ZXZ lock), Euler parameters."""
    q0 = spatial.pose(np.zeros(3), np.eye(3))
    qd0 = np.concatenate([np.zeros(3), initial_rates(spatial.EULER_PARAMETERS, q0[3:], OMEGA0)])
    mech = free_top(spatial.EULER_PARAMETERS, q0)
    ts = jnp.linspace(0.0, T_END, 2001)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, T_END), saveat=ts, rtol=TOL, atol=TOL)
    return mech, sol


def test_free_top_in_euler_parameters(free_top_run, record_property):
    """L = A J ω' constant, energy constant, and the symmetry axis k = A e_z precessing about
    L at Ω = |L| / J₁ through the orientation where ZXZ angles lock (k = e_z) every period."""
    mech, sol = free_top_run
    assert bool(sol.successful)
    layout = spatial.Layout.from_mechanism(mech)
    J = np.array([J_T, J_T, J_A])
    A = jax.vmap(layout.rotations)(sol.q)[:, 0]
    omega = jax.vmap(layout.body_angular_velocities)(sol.q, sol.qd)[:, 0]
    L = jnp.einsum("tij,tj->ti", A, J * omega)
    L0 = J * OMEGA0
    momentum_error = float(jnp.max(jnp.abs(L - L0))) / np.linalg.norm(L0)
    energy_error = float(jnp.max(jnp.abs(sol.energy - sol.energy[0]) / sol.energy[0]))
    assert_close(sol.energy[0], 0.5 * OMEGA0 @ (J * OMEGA0), 1e-15, 0, "T(0)")
    # The precession angle of k about L̂, unwrapped, against Ω t.
    l_hat = L0 / np.linalg.norm(L0)
    u = np.cross(l_hat, [0.0, 1.0, 0.0])
    u /= np.linalg.norm(u)
    v = np.cross(l_hat, u)
    k = np.asarray(A[:, :, 2])
    angle = np.unwrap(np.arctan2(k @ v, k @ u))
    rate = (angle[-1] - angle[0]) / T_END
    analytic = np.linalg.norm(L0) / J_T
    precession_error = abs(rate / analytic - 1)
    norm_error = float(jnp.max(jnp.abs(jnp.linalg.norm(sol.q[:, 3:], axis=1) - 1)))
    for name, x in (
        ("angular_momentum_error", momentum_error),
        ("energy_relative_error", energy_error),
        ("precession_rate_relative_error", precession_error),
        ("normalisation_error", norm_error),
    ):
        record_property(name, float(x))  # a plain float: pytest-xdist sends it between processes
    assert momentum_error < 1e-9
    assert energy_error < 1e-10
    assert precession_error < 1e-8
    assert norm_error < 1e-12
    # It swept through the ZXZ lock (k = e_z) about T_END Ω / 2π ≈ 4 times, and k travelled
    # over a cone of half-angle arccos(L̂_z) ≈ 53° about L̂: θ from 0 to 106°.
    theta = np.arccos(np.clip(k[:, 2], -1, 1))
    assert float(np.max(theta)) > np.radians(100)
    passes = np.sum((theta[1:-1] < theta[:-2]) & (theta[1:-1] < theta[2:]))
    assert passes == int(T_END * analytic / (2 * np.pi))
    assert float(np.min(theta[1:])) < 0.05  # the lock was reached to within the output step


def test_free_top_in_zxz_angles_stops_at_the_lock(free_top_run, record_property):
    """The same motion in ZXZ angles (started at t = 1 s, off the lock, from the Euler
    parameter run's state) cannot pass the lock: M loses rank where k returns to e_z, one
    precession period 2π J₁ / |L| after the start at the identity. The step size collapses
    there with M's Cholesky pivot near zero: `singular_configuration`, with its time."""
    mech, sol = free_top_run
    i = 100  # t = 1 s
    A1 = np.asarray(spatial.Layout.from_mechanism(mech).rotations(sol.q[i]))[0]
    omega1 = np.asarray(spatial.parameter_angular_velocity(sol.q[i, 3:], sol.qd[i, 3:]))
    q1 = spatial.pose(sol.q[i, :3], A1, spatial.ZXZ)
    qd1 = np.concatenate([sol.qd[i, :3], initial_rates(spatial.ZXZ, q1[3:], omega1)])
    zxz = free_top(spatial.ZXZ, q1)
    t_span = (float(sol.ts[i]), T_END)
    result = jaxmbs.simulate(zxz, q1, qd1, t_span, rtol=TOL, atol=TOL, throw=False)
    lock = 2 * np.pi * J_T / np.linalg.norm(np.array([J_T, J_T, J_A]) * OMEGA0)
    record_property("zxz_result", str(jaxmbs.RESULTS[result.result]))
    record_property("zxz_stop_minus_lock_time", float(result.t_final - lock))
    assert bool(result.result == jaxmbs.RESULTS.singular_configuration)
    assert abs(float(result.t_final) - lock) < 1e-4


# --- the heavy symmetric top ----------------------------------------------------------------

#: Mass, pivot-to-centre distance, centroidal moments (transverse, axial), spin, initial tilt.
HEAVY = {"m": 1.0, "l": 0.1, "Jt": 0.005, "Ja": 0.01, "g": 9.81}
SPIN, TILT = 30.0, 0.5


@pytest.fixture(scope="module")
def heavy_top():
    """A symmetric top on a fixed point (spherical joint at the ground's origin, centre of mass
    l up its axis), released at rest in precession and nutation with spin ω₃ and tilt θ₀."""
    mech = spatial.spatial_mechanism(
        [spatial.Body("top", "m", lambda p: jnp.stack([p["Jt"], p["Jt"], p["Ja"]]))],
        [
            spatial.Spherical(
                "pivot", 0, lambda p: jnp.stack([0.0, 0.0, -p["l"]]), None, np.zeros(3)
            )
        ],
        {k: jnp.asarray(v) for k, v in HEAVY.items()},
        gravity=lambda p: jnp.stack([0.0, 0.0, -p["g"]]),
        reference_q=spatial.pose([0.0, 0.0, HEAVY["l"]], np.eye(3)),
    )
    A0 = axis_angle([1.0, 0.0, 0.0], TILT)
    q_guess = spatial.pose(A0 @ [0.0, 0.0, HEAVY["l"]], A0)
    rates = initial_rates(spatial.EULER_PARAMETERS, q_guess[3:], np.array([0.0, 0.0, SPIN]))
    q0, qd0 = jaxmbs.assemble(mech, q_guess, np.concatenate([np.zeros(3), rates]))
    return mech, q0, qd0


def test_assemble_and_projection_keep_the_normalisation(heavy_top):
    """Newton from Euler parameters 10 % too long (and off the joint) lands on eᵀe = 1 and the
    joint; the position projection of `simulate` does the same from a perturbed state."""
    mech, q0, _ = heavy_top
    rng = np.random.default_rng(SEED)
    guess = np.asarray(q0) + 0.02 * rng.normal(size=7)
    guess[3:] *= 1.1
    q, qd = jaxmbs.assemble(mech, guess, rng.normal(size=7))
    assert abs(float(jnp.linalg.norm(q[3:])) - 1) < 1e-15
    assert float(jnp.max(jnp.abs(mech.constraints(0.0, q, mech.params)))) < 1e-15
    assert abs(float(q[3:] @ qd[3:])) < 1e-15  # the normalisation's velocity row, eᵀė = 0
    projected = jax.jit(lambda q: jaxmbs.project_positions(mech, q, 0.0, mech.params, 4))(
        jnp.asarray(guess)
    )
    assert abs(float(jnp.linalg.norm(projected[3:])) - 1) < 1e-14
    assert float(jnp.max(jnp.abs(mech.constraints(0.0, projected, mech.params)))) < 1e-14
    assert mech.constraint_groups[0] == ("normalization", (0,))


def nutation_bounds() -> tuple[float, float]:
    """cos θ between u₀ = cos θ₀ and u₁, the other root in [−1, 1] of
    u̇² = (u₀ − u) [β (1 − u²) − a² (u₀ − u)] (released with θ̇ = φ̇ = 0; Goldstein §5.7),
    a = I₃ω₃ / I₁, β = 2 m g l / I₁, I₁ = J_t + m l² about the fixed point, I₃ = J_a."""
    p = HEAVY
    I1 = p["Jt"] + p["m"] * p["l"] ** 2
    a, beta, u0 = p["Ja"] * SPIN / I1, 2 * p["m"] * p["g"] * p["l"] / I1, np.cos(TILT)
    u1 = (a**2 - np.sqrt(a**4 - 4 * beta * a**2 * u0 + 4 * beta**2)) / (2 * beta)
    return u0, u1


def refined_extrema(u: np.ndarray, find_max: bool) -> np.ndarray:
    """The extreme values of sampled u(t) at its interior local extrema, each refined by the
    parabola through the sample and its two neighbours."""
    s = u if find_max else -u
    i = 1 + np.nonzero((s[1:-1] >= s[:-2]) & (s[1:-1] > s[2:]))[0]
    a, b, c = s[i - 1], s[i], s[i + 1]
    peak = b + (a - c) ** 2 / (8 * (2 * b - a - c))
    return peak if find_max else -peak


@pytest.fixture(scope="module")
def heavy_top_run(heavy_top):
    """2 s of the heavy top (several nutations), 8001 outputs."""
    mech, q0, qd0 = heavy_top
    ts = jnp.linspace(0.0, 2.0, 8001)
    return jaxmbs.simulate(mech, q0, qd0, (0.0, 2.0), saveat=ts, rtol=TOL, atol=TOL)


def test_heavy_top_nutation_bounds(heavy_top, heavy_top_run, record_property):
    """cos θ of the symmetry axis oscillates between the two roots of the energy cubic."""
    mech, _, _ = heavy_top
    sol = heavy_top_run
    assert bool(sol.successful)
    u = np.asarray(jax.vmap(spatial.Layout.from_mechanism(mech).rotations)(sol.q)[:, 0, 2, 2])
    u0, u1 = nutation_bounds()
    tops, bottoms = refined_extrema(u, True), refined_extrema(u, False)
    assert len(tops) >= 3 and len(bottoms) >= 3  # several nutations
    top_error, bottom_error = np.max(np.abs(tops - u0)), np.max(np.abs(bottoms - u1))
    record_property("nutation_top_error", float(top_error))
    record_property("nutation_bottom_error", float(bottom_error))
    assert u0 - u1 > 0.1  # a real nutation
    assert top_error < 1e-8
    assert bottom_error < 1e-8
    energy = np.asarray(sol.energy)
    assert np.max(np.abs(energy - energy[0])) < 1e-10 * abs(energy[0])


def test_heavy_top_with_switching_coordinate_partitioning(heavy_top, heavy_top_run):
    """Coordinate partitioning (`method="partitioned"`: independent coordinates chosen among
    r and e, switched when a partition degenerates) follows the same heavy top as the default
    formulation."""
    mech, q0, qd0 = heavy_top
    ts = heavy_top_run.ts[::400]
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, 2.0), saveat=ts, method="partitioned", rtol=TOL, atol=TOL
    )
    assert bool(sol.successful)
    assert_close(sol.q, heavy_top_run.q[::400], 0, 1e-9, "q")
    assert float(jnp.max(jnp.abs(jnp.linalg.norm(sol.q[:, 3:], axis=1) - 1))) < 1e-12


def test_gradient_through_a_heavy_top(heavy_top, record_property):
    """d(cos θ at 0.5 s)/d(J_t) and d/d(m) by forward-mode autodiff through the solve,
    against central differences of the same compiled solve."""
    mech, q0, qd0 = heavy_top

    @jax.jit
    def final_u(params):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, 0.5), params=params, rtol=TOL, atol=TOL,
            adjoint=diffrax.ForwardMode(),
        )  # fmt: skip
        return sol.q[-1, 3] ** 2 + sol.q[-1, 6] ** 2 - sol.q[-1, 4] ** 2 - sol.q[-1, 5] ** 2

    h = 1e-5
    for key in ("Jt", "m"):
        direction = {k: jnp.asarray(float(k == key)) for k in mech.params}
        _, derivative = jax.jvp(final_u, (mech.params,), (direction,))
        up = {**mech.params, key: mech.params[key] * (1 + h)}
        down = {**mech.params, key: mech.params[key] * (1 - h)}
        fd = (final_u(up) - final_u(down)) / (2 * h * mech.params[key])
        error = abs(float(derivative / fd - 1))
        record_property(f"gradient_{key}_relative_error", error)
        assert abs(float(fd)) > 1e-2
        assert error < 1e-6, (key, float(derivative), float(fd))
