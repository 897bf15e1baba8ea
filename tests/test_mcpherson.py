"""The McPherson struts of Pękal–Frączek 2016 (§4.1): structure, formulations, motion, energy
and a parameter gradient.

Every method in `jaxmbs.METHODS` is checked, so the tests cover the formulations present in
the library. Independent references: a hand-derived NumPy implementation of the same strut
(`benchmarks/numpy_mcpherson.py`), the energy balance, and central finite differences.
"""

import pathlib
import sys

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, relative_error

import jaxmbs
from jaxmbs.model.joints import spatial
from jaxmbs.models import mcpherson

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "benchmarks"))
import numpy_mcpherson as reference  # noqa: E402

SEED = 20261124  # the random states' own generator
N_STATES = 50
TOL = 1e-10  # integration tolerance of the 10 s runs
TS = jnp.linspace(0.0, 10.0, 2001)
#: Formulations whose parameter derivative is checked (issue 3's acceptance list).
GRADIENT_METHODS = ["qr", "svd", "partitioned"]


@pytest.fixture(scope="module")
def struts():
    return {
        "simplified": mcpherson.mcpherson_simplified(),
        "redundant": mcpherson.mcpherson_redundant(),
    }


#: Table 1 of Pękal–Frączek 2016 (m), written out here rather than read from the model.
PUBLISHED_LENGTHS = {
    "AB": 0.3,
    "AA_a": 0.025,
    "AA_b": 0.025,
    "CD": 0.45,
    "CE": 0.1,
    "CF": 0.25,
    "BC": 0.05,
    "FG": 0.1,
    "EH": 0.15,
    "GI": 0.05,
    "JK": 0.3,
    "IL": 0.5,
    "LN": 0.2,
}


def test_design_hardpoints_honour_table_1_and_the_text(struts):
    """The design hardpoints against the published lengths and the geometry the model's text
    states (x forward, y outboard, z up), and the design configuration against the joints."""
    assert set(mcpherson.TABLE_1) == set(PUBLISHED_LENGTHS)
    points = mcpherson.design_hardpoints()
    for name, length in PUBLISHED_LENGTHS.items():
        a, b = name[0], name[1:]
        assert abs(np.linalg.norm(points[a] - points[b]) - length) < 1e-12, name
    axis = (points["D"] - points["C"]) / np.linalg.norm(points["D"] - points["C"])
    assert abs(np.degrees(np.arctan2(-axis[1], axis[2])) - 10.0) < 1e-12  # inward: kingpin
    assert abs(np.degrees(np.arctan2(-axis[0], axis[2])) - 5.0) < 1e-12  # rearward: caster
    assert_close(points["C"] - points["B"], [0.0, 0.0, 0.05], 0, 1e-15, "C above B")
    assert_close(points["B"] - points["A"], [0.0, 0.3, 0.0], 0, 1e-15, "AB horizontal, outboard")
    assert_close(points["K"] - points["D"], 0.15 * axis, 0, 1e-15, "K 0.15 m above D")
    assert_close(np.cross(points["J"] - points["C"], axis), np.zeros(3), 0, 1e-15, "J on CD")
    assert_close(points["L"] - points["I"], [0.0, -0.5, 0.0], 0, 1e-15, "tie rod along −y")
    q = jnp.asarray(mcpherson.design_configuration())
    for mech in struts.values():
        assert float(jnp.max(jnp.abs(mech.constraints(0.0, q, mech.params)))) < 1e-15
    # Every body frame has θ = π/2 in the design position: far from the gimbal lock.
    assert_close(q.reshape(5, 6)[:, 4], np.pi / 2, 0, 1e-15, "θ")


def test_link_lengths_hold_in_an_assembled_position(struts):
    """Assembled with the arm turned up by 0.3 rad and the rack shifted by 2 cm, every body
    has moved, and the hardpoint distances — from the body frames of q, and across the
    joints where a link is the only connection (A on the ground to B on the strut: the arm;
    I on the strut to L on the rack: the tie rod; J on the piston rod to K on the ground) —
    are the published lengths."""
    mech = struts["simplified"]
    q, _ = mcpherson.initial_state(mech, 0.3, 0.02)
    design, points = mcpherson.design_configuration(), mcpherson.design_hardpoints()
    frames = spatial.Layout.from_mechanism(mech).frames(q)

    def moved(body, name):  # the hardpoint, fixed in `body` at its design position
        r, angles = design[6 * body : 6 * body + 3], design[6 * body + 3 : 6 * body + 6]
        local = np.asarray(spatial.rotation(jnp.asarray(angles))).T @ (points[name] - r)
        return np.asarray(frames.point(body, jnp.asarray(local)))

    strut = {name: moved(mcpherson.STRUT, name) for name in "BCDEFGHI"}
    at = {
        "A": points["A"],  # on the ground
        "A_a": moved(mcpherson.ARM, "A_a"),
        "A_b": moved(mcpherson.ARM, "A_b"),
        **strut,
        "J": moved(mcpherson.ROD, "J"),
        "K": points["K"],  # on the ground
        "L": moved(mcpherson.RACK, "L"),
        "N": moved(mcpherson.RACK, "N"),
    }
    for name, length in PUBLISHED_LENGTHS.items():
        a, b = name[0], name[1:]
        assert abs(np.linalg.norm(at[a] - at[b]) - length) < 1e-10, name
    assert np.linalg.norm(at["B"] - points["B"]) > 0.05  # the wheel travelled
    assert abs(at["L"][1] - points["L"][1] - 0.02) < 1e-10  # the rack moved by its offset
    assert np.linalg.norm(at["I"] - points["I"]) > 0.05  # so did the tie rod's outer end


def test_dof_and_redundancy(struts):
    simplified, redundant = struts["simplified"].structure, struts["redundant"].structure
    assert (simplified.n, simplified.n_constraints, simplified.rank) == (30, 26, 26)
    assert (simplified.dof, simplified.redundancy) == (4, 0)
    assert (redundant.n, redundant.n_constraints, redundant.rank) == (30, 29, 26)
    assert (redundant.dof, redundant.redundancy) == (4, 3)


def test_two_of_the_dof_are_local_mobilities(struts):
    """Spinning the piston rod or the tie rod about its own axis violates no constraint."""
    mech = struts["redundant"]
    q = jnp.asarray(mcpherson.design_configuration())
    C = jaxmbs.constraint_jacobian(mech, q, 0.0, mech.params)
    points = mcpherson.design_hardpoints()
    for body, (a, b) in ((mcpherson.ROD, ("J", "K")), (mcpherson.TIE_ROD, ("I", "L"))):
        axis = (points[b] - points[a]) / np.linalg.norm(points[b] - points[a])
        angles = q[6 * body + 3 : 6 * body + 6]
        G = jax.jacfwd(spatial.body_angular_velocity, argnums=1)(angles, jnp.zeros(3))
        qd = (
            jnp.zeros(30)
            .at[6 * body + 3 : 6 * body + 6]
            .set(
                jnp.linalg.solve(G, mcpherson.FRAME.T @ axis)  # ω' of a spin about the axis
            )
        )
        assert float(jnp.max(jnp.abs(C @ qd))) < 1e-14
        assert float(jnp.max(jnp.abs(C @ qd.at[6 * body].set(1e-3)))) > 1e-4  # not everything is


@pytest.fixture(scope="module")
def states(struts, motion):
    """Random consistent (t, q, q̇) spread over the 10 s motion, where the arm swings through
    more than 90° and the rack travels: configurations at random output times, perturbed in
    every coordinate and Newton-projected, and projected random velocities. The simplified
    and the redundant strut share the constraint manifold, so the states are consistent for
    both."""
    mech = struts["simplified"]
    _, sol, _ = motion["simplified"]

    @jax.jit
    def consistent(q, v):
        q = jaxmbs.project_positions(mech, q, 0.0, mech.params, 8)
        return q, jaxmbs.project_velocities(mech, q, v, 0.0, mech.params)

    rng = np.random.default_rng(SEED)
    guess = sol.q[rng.integers(0, TS.shape[0], N_STATES)]
    dq = jnp.asarray(rng.normal(scale=0.05, size=(N_STATES, 30)))
    v = jnp.asarray(rng.normal(size=(N_STATES, 30)))
    q, qd = jax.lax.map(lambda a: consistent(*a), (guess + dq, v))
    t = jnp.asarray(rng.uniform(0.0, 10.0, N_STATES))
    return t, q, qd


@pytest.fixture(scope="module")
def accelerations(struts, states):
    """q̈ and the generalized reactions Cᵀλ of every method at every state, per strut.

    The model terms M, Q, C, Γ are evaluated once per state and every formulation solves
    the same equations from them (one compilation of the strut's kinematics, not one per
    method)."""
    out = {}
    for name, mech in struts.items():

        @jax.jit
        def terms(t, q, qd, mech=mech):
            p = mech.params
            residuals = (
                jaxmbs.position_residual(mech, q, t, p),
                jaxmbs.velocity_residual(mech, q, qd, t, p),
            )
            C = jaxmbs.constraint_jacobian(mech, q, t, p)
            gamma = jaxmbs.acceleration_rhs(mech, q, qd, t, p)
            return (mech.mass_matrix(q, p), mech.forces(t, q, qd, p), C, gamma), residuals

        @jax.jit
        def all_methods(M, Q, C, gamma, mech=mech):
            result = {}
            for method in jaxmbs.METHODS:
                formulation = jaxmbs.formulations.get_formulation(method)
                qdd, lam = formulation.multipliers(M, Q, C, gamma, mech)
                result[method] = (qdd, C.T @ lam)
            return result

        (M, Q, C, gamma), residuals = jax.lax.map(lambda s: terms(*s), states)
        out[name] = (jax.lax.map(lambda x: all_methods(*x), (M, Q, C, gamma)), residuals)
    return out


@pytest.mark.parametrize("strut", ["simplified", "redundant"])
def test_states_are_consistent(states, accelerations, strut):
    _, (phi, c) = accelerations[strut]
    assert float(jnp.max(jnp.abs(phi))) < 1e-12
    assert float(jnp.max(jnp.abs(c))) < 1e-12
    _, q, qd = states
    assert float(jnp.ptp(q[:, 5])) > 1.0  # arm angles over a wide range
    assert float(jnp.min(jnp.max(jnp.abs(qd), axis=1))) > 0.1  # every state moves


@pytest.mark.parametrize("strut", ["simplified", "redundant"])
@pytest.mark.parametrize("method", [m for m in jaxmbs.METHODS if m != "kkt"])  # kkt: the reference
def test_every_method_gives_the_same_accelerations_and_reactions(
    accelerations, strut, method, record_property
):
    """q̈ and Cᵀλ of every other method against the KKT system, relative to each state's
    largest component, at every one of the N_STATES states."""
    results, _ = accelerations[strut]
    qdd_ref, reaction_ref = results["kkt"]
    qdd, reaction = results[method]
    qdd_error = max(relative_error(qdd[i], qdd_ref[i]) for i in range(N_STATES))
    reaction_error = max(relative_error(reaction[i], reaction_ref[i]) for i in range(N_STATES))
    record_property("max_relative_error_qdd", float(qdd_error))
    record_property("max_relative_error_reaction", float(reaction_error))
    assert qdd_error < 1e-9, method
    assert reaction_error < 1e-9, method


def test_redundant_strut_has_the_same_accelerations_and_reactions(accelerations):
    """Redundant constraints change neither q̈ nor the generalized reactions Cᵀλ."""
    (simplified, _), (redundant, _) = accelerations["simplified"], accelerations["redundant"]
    for i in range(N_STATES):
        assert relative_error(redundant["qr"][0][i], simplified["qr"][0][i]) < 1e-9
        assert relative_error(redundant["qr"][1][i], simplified["qr"][1][i]) < 1e-9


@pytest.mark.parametrize("strut", ["simplified", "redundant"])
def test_against_hand_derived_numpy_strut(accelerations, states, strut):
    """Independent check of M, the gyroscopic terms, Φ_q and Γ: hand-written derivatives of
    the rotation matrix and of every constraint row, QR with column pivoting in NumPy."""
    results, _ = accelerations[strut]
    ref = reference.Strut(redundant=strut == "redundant")
    t, q, qd = (np.asarray(x) for x in states)
    for i in range(5):
        qdd, reaction = ref.solve(t[i], q[i], qd[i])
        assert relative_error(results["qr"][0][i], qdd) < 1e-10
        assert relative_error(results["qr"][1][i], reaction) < 1e-10


@pytest.fixture(scope="module")
def motion(struts):
    """10 s of both struts from the design position at rest (no stabilisation, tight tolerance),
    with the power of F_z and F_y at every output time. Jitted over the parameters, so the
    finite differences reuse the compiled solve."""
    out = {}
    for name, mech in struts.items():
        q0, qd0 = mcpherson.initial_state(mech)

        @jax.jit
        def run(params, mech=mech, q0=q0, qd0=qd0):
            sol = jaxmbs.simulate(
                mech,
                q0,
                qd0,
                (0.0, 10.0),
                saveat=TS,
                params=params,
                stabilization="none",
                rtol=TOL,
                atol=TOL,
                adjoint=diffrax.ForwardMode(),
            )
            power = jax.vmap(lambda t, q, qd: mech.elements.power(t, q, qd, params))
            return sol, power(sol.ts, sol.q, sol.qd)

        out[name] = (run, *run(mech.params))
    return out


def test_simplified_and_redundant_struts_move_identically(motion, record_property):
    (_, a, _), (_, b, _) = motion["simplified"], motion["redundant"]
    assert bool(a.successful) and bool(b.successful)
    record_property("max_abs_difference_q", float(jnp.max(jnp.abs(b.q - a.q))))
    record_property("max_relative_difference_qd", relative_error(b.qd, a.qd))
    assert_close(b.q, a.q, 0, 1e-9, "q")
    assert relative_error(b.qd, a.qd) < 1e-9
    # It is a large motion: the arm swings through more than 90°, the rack travels.
    assert float(jnp.ptp(a.q[:, 5])) > np.pi / 2
    assert float(jnp.ptp(a.q[:, 6 * mcpherson.RACK + 1])) > 0.05
    assert float(jnp.max(a.position_residual)) < 1e-8


def cumulative_simpson(power, h):
    """∫₀ᵗ P dt at the even output times (composite Simpson)."""
    p = np.asarray(power)
    panels = h / 3 * (p[:-2:2] + 4 * p[1:-1:2] + p[2::2])
    return np.concatenate([[0.0], np.cumsum(panels)])


@pytest.mark.parametrize("strut", ["simplified", "redundant"])
def test_energy_balance(motion, strut, record_property):
    """E(t) − E(0) = ∫ (F_z ż₁ + F_y ẏ₅) dt: kinetic + gravitational energy minus the work
    of the applied forces is constant to the integration tolerance."""
    _, sol, power = motion[strut]
    energy = np.asarray(sol.energy)[::2]
    work = cumulative_simpson(power, float(TS[1] - TS[0]))
    imbalance = energy - energy[0] - work
    scale = np.max(np.abs(energy))
    record_property("max_imbalance_over_energy_scale", float(np.max(np.abs(imbalance)) / scale))
    assert np.ptp(energy) > 5.0  # energy really flows: the loads do work
    # Measured: 5.6e-10 relative for both struts at rtol = atol = 1e-10 (integration error
    # plus the Simpson rule on the 5 ms output grid); both struts alike.
    assert np.max(np.abs(imbalance)) < 20 * TOL * scale, np.max(np.abs(imbalance))


def _with_mass(mech, m):
    return {**mech.params, "m2": m}


@pytest.fixture(scope="module")
def wheel_height_central_difference(struts, motion):
    """d(final wheel-centre height)/d(m₂) at m₂ = 1 by central differences of the (reused)
    compiled solve of `motion`: computed once, the reference of every formulation's
    derivative."""
    mech = struts["simplified"]
    run = motion["simplified"][0]
    # The 10 s response is strongly nonlinear in m₂ (the arm swings over): h = 1e-4 leaves a
    # truncation error of 1e-4 relative; at h = 1e-5 the difference quotient has converged
    # to ~1e-6 while the integration noise (tolerance 1e-10) is still far below.
    h = 1e-5

    def height(params):
        return mcpherson.wheel_centre(mech, run(params)[0].q[-1], params)[2]

    return (height(_with_mass(mech, 1.0 + h)) - height(_with_mass(mech, 1.0 - h))) / (2 * h)


@pytest.mark.parametrize("method", GRADIENT_METHODS)
def test_gradient_of_wheel_height_wrt_mass(
    struts, motion, wheel_height_central_difference, method, record_property
):
    """d(final wheel-centre height)/d(m₂) by forward-mode autodiff through the solve, against
    central differences of the (reused) compiled solve."""
    mech = struts["simplified"]
    _, sol, _ = motion["simplified"]
    q0, qd0 = sol.q[0], sol.qd[0]
    fd = wheel_height_central_difference

    def final_height(m):
        params = _with_mass(mech, m)
        sol = jaxmbs.simulate(
            mech,
            q0,
            qd0,
            (0.0, 10.0),
            params=params,
            method=method,
            stabilization="none",
            rtol=TOL,
            atol=TOL,
            adjoint=diffrax.ForwardMode(),
        )
        return mcpherson.wheel_centre(mech, sol.q[-1], params)[2]

    _, derivative = jax.jit(lambda m: jax.jvp(final_height, (m,), (jnp.ones_like(m),)))(1.0)
    record_property("derivative", float(derivative))
    record_property("relative_error_vs_central_difference", abs(float(derivative / fd - 1)))
    assert abs(float(fd)) > 1e-3  # a real dependence
    assert abs(float(derivative - fd)) < 1e-5 * abs(float(fd)), (float(derivative), float(fd))


@pytest.fixture(scope="module")
def euler_parameter_struts():
    return {
        "simplified": mcpherson.mcpherson_simplified(spatial.EULER_PARAMETERS),
        "redundant": mcpherson.mcpherson_redundant(spatial.EULER_PARAMETERS),
    }


@pytest.mark.parametrize("strut", ["simplified", "redundant"])
def test_euler_parameter_strut_has_the_same_redundancy(struts, euler_parameter_struts, strut):
    """In Euler parameters: 5 more coordinates and 5 normalisation rows, one more constraint
    group whose reaction is unique, the same dof and redundancy, and the same verdict for
    every joint's reaction."""
    zxz, ep = struts[strut], euler_parameter_struts[strut]
    a = jaxmbs.analyze_solvability(zxz, mcpherson.design_configuration())
    b = jaxmbs.analyze_solvability(
        ep, mcpherson.design_configuration(orientation=spatial.EULER_PARAMETERS)
    )
    assert (b.n, b.n_constraints, b.rank) == (a.n + 5, a.n_constraints + 5, a.rank + 5)
    assert (b.dof, b.redundancy) == (a.dof, a.redundancy) == (4, 3 if strut == "redundant" else 0)
    assert [g.name for g in b.groups] == ["normalization"] + [g.name for g in a.groups]
    assert b.solvable == {"normalization": True, **a.solvable}
    assert ep.group_rows("normalization") == (0, 1, 2, 3, 4)


def test_euler_parameter_strut_follows_the_zxz_strut(
    struts, euler_parameter_struts, motion, record_property
):
    """The simplified strut in Euler parameters against the paper's ZXZ angles over the same
    10 s from the same design position: the wheel-centre path agrees to 1e-8 m, every |e|
    stays 1, and every joint's multipliers agree (the joints' rows are the same functions of
    the body frames in both coordinates, and the normalisation rows are orthogonal to them:
    λ of a joint is its reaction in the joint's own terms, whatever the body coordinates)."""
    _, zxz, _ = motion["simplified"]
    mech = euler_parameter_struts["simplified"]
    q0, qd0 = mcpherson.initial_state(mech)
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, 10.0), saveat=TS, stabilization="none", rtol=TOL, atol=TOL
    )
    assert bool(sol.successful)

    def path(m, q):
        return jax.jit(jax.vmap(lambda q_: mcpherson.wheel_centre(m, q_)))(q)

    ep_path = path(mech, sol.q)  # one program per strut, each called once
    difference = float(jnp.max(jnp.abs(ep_path - path(struts["simplified"], zxz.q))))
    e = spatial.Layout.from_mechanism(mech).euler_parameters(sol.q)
    norm_error = float(jnp.max(jnp.abs(jnp.linalg.norm(e, axis=-1) - 1)))
    lam_error = max(
        relative_error(sol.multipliers[:, ep_rows], zxz.multipliers[:, zxz_rows])
        for ep_rows, zxz_rows in (
            (list(mech.group_rows(name)), list(rows))
            for name, rows in struts["simplified"].constraint_groups
        )
    )
    record_property("max_wheel_centre_difference", difference)
    record_property("max_normalisation_error", norm_error)
    record_property("max_joint_multiplier_relative_difference", lam_error)
    assert difference < 1e-8
    assert lam_error < 1e-6
    assert norm_error < 1e-8
    assert float(jnp.ptp(ep_path[:, 2])) > 0.1  # the wheel travelled


def test_every_method_on_the_euler_parameter_strut(euler_parameter_struts):
    """q̈ and Cᵀλ of every formulation against the KKT system on the redundant strut in Euler
    parameters (normalisation rows in C, the completed rotational block in M), at assembled
    states with random consistent velocities."""
    mech = euler_parameter_struts["redundant"]
    rng = np.random.default_rng(SEED)
    states = [
        jaxmbs.assemble(mech, mcpherson.initial_state(mech, a, r)[0], rng.normal(size=mech.n))
        for a, r in ((0.0, 0.0), (0.4, 0.02), (-0.3, -0.03))
    ]

    @jax.jit
    def all_methods(q, qd):
        p = mech.params
        M, Q = mech.mass_matrix(q, p), mech.forces(0.0, q, qd, p)
        C = jaxmbs.constraint_jacobian(mech, q, 0.0, p)
        gamma = jaxmbs.acceleration_rhs(mech, q, qd, 0.0, p)
        result = {}
        for method in jaxmbs.METHODS:
            formulation = jaxmbs.formulations.get_formulation(method)
            qdd, lam = formulation.multipliers(M, Q, C, gamma, mech)
            result[method] = (qdd, C.T @ lam)
        return result

    for q, qd in states:
        assert abs(float(jnp.linalg.norm(q[3:7])) - 1) < 1e-14
        results = all_methods(q, qd)
        qdd_ref, reaction_ref = results["kkt"]
        assert float(jnp.max(jnp.abs(qdd_ref))) > 0.1  # it accelerates
        for method, (qdd, reaction) in results.items():
            if method == "kkt":  # the reference itself
                continue
            assert relative_error(qdd, qdd_ref) < 1e-9, method
            assert relative_error(reaction, reaction_ref) < 1e-9, method
