"""The mobile robot with trolley (Wojtyra–Frączek 2013, §4): ranks, redundancy, which
reactions are unique, and the paper's three redundant-row elimination variants."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

import jaxmbs
from jaxmbs.models import mobile_robot as robot

T1 = 10.0


@pytest.fixture(scope="module")
def model():
    mech = robot.mobile_robot()
    return (mech, *robot.initial_state(mech))


@pytest.fixture(scope="module")
def variants(model):
    """The three elimination variants (one compilation: the kept rows are data)."""
    mech, q0, qd0 = model
    ts = jnp.linspace(0.0, T1, 101)
    out = {}
    for name, drop in robot.PAPER_ELIMINATIONS.items():
        method = jaxmbs.eliminate_rows(mech, drop, q0)
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, T1), saveat=ts, method=method, rtol=1e-10, atol=1e-10
        )
        out[name] = (sol, jaxmbs.solution_reactions(mech, sol))
    return out


def check_verdicts(report):
    assert (report.rank_holonomic, report.rank_pfaffian, report.rank) == (17, 4, 20)
    assert (report.redundancy, report.dof) == (2, 1)
    for g in report.groups:
        expected = g.name in robot.SOLVABLE
        assert g.unique == expected and g.unique_by_rank == expected, g.name
    assert set(report.solvable) == set(robot.SOLVABLE) | set(robot.NOT_SOLVABLE)


def test_solvability_at_q0(model):
    mech, q0, _ = model
    report = jaxmbs.analyze_solvability(mech, q0)
    check_verdicts(report)
    # B_X of the paper (§4.2): the basis of the left null space is arbitrary, so compare
    # the coordinates B_X touches and its singular values (both basis-independent).
    a = 0.05
    paper = {
        "B": ({"platform.y", "platform.phi", "carrier2.y"}, [np.sqrt((2 + (4 * a) ** 2) / 6), 0]),
        "C": ({"platform.y", "platform.phi", "carrier3.y"}, [np.sqrt((2 + (4 * a) ** 2) / 6), 0]),
        "W1": ({"carrier2.y"}, [1 / np.sqrt(6), 0]),
        "W2": ({"carrier3.y"}, [1 / np.sqrt(6), 0]),
        "W3": ({"platform.y"}, [np.sqrt(1 / 6 + 1 / 2), 0]),
        "W4": ({"platform.y"}, [np.sqrt(1 / 6 + 1 / 2), 0]),
    }
    for name, (coords, sv) in paper.items():
        B = report.group(name).B
        touched = {mech.coordinate_names[i] for i in np.flatnonzero(np.abs(B).max(axis=1) > 1e-9)}
        assert touched == coords, name
        assert_close(np.linalg.svd(B, compute_uv=False), sv, 0, 1e-12, f"σ(B_{name})")


def test_variants_move_identically_and_keep_the_knife_edges(model, variants):
    mech, _, _ = model
    sols = [sol for sol, _ in variants.values()]
    for sol in sols:
        assert bool(sol.result == jaxmbs.RESULTS.successful)
        # velocity_residual is max |c| over Φ̇ and the five knife edges ψ.
        assert float(jnp.max(sol.velocity_residual)) <= 1e-10
        assert float(jnp.max(sol.position_residual)) <= 1e-10
    for sol in sols[1:]:
        assert_close(sol.q, sols[0].q, 0, 1e-9, "trajectory")
        assert_close(sol.qd, sols[0].qd, 0, 1e-9, "velocities")
    # The steering profile: right turn (heading down), straight, left turn back to ~x0.
    heading = np.asarray(sols[0].q[:, 2])
    assert heading.min() < -0.15 and abs(heading[-1]) < 0.02
    assert float(sols[0].q[-1, 0] - sols[0].q[0, 0]) > 0.9


def test_unique_reactions_do_not_depend_on_the_elimination(model, variants):
    mech, _, _ = model
    results = [r for _, r in variants.values()]
    first = results[0]
    for r in results[1:]:
        assert_close(r.generalized, first.generalized, 0, 1e-8, "Cᵀλ")
        for name in robot.SOLVABLE:
            scale = max(1.0, float(jnp.max(jnp.abs(first.groups[name]))))
            assert_close(r.groups[name], first.groups[name], 0, 1e-8 * scale, name)
            for component, value in r.joints[name].items():
                assert_close(value, first.joints[name][component], 0, 1e-8, f"{name} {component}")
    # Non-unique ones differ (paper Fig. 4: joint B and knife edge W3); W4 is dropped in
    # all three variants, so its reaction is zero in all of them.
    for name in robot.NOT_SOLVABLE:
        values = [r.groups[name] for r in results]
        spread = max(float(jnp.max(jnp.abs(v - values[0]))) for v in values[1:])
        magnitude = max(float(jnp.max(jnp.abs(v))) for v in values)
        if name == "W4":
            assert magnitude < 1e-12
        else:
            assert spread > 1e-3 * magnitude > 0, name
    for name, component in (("B", "force"), ("W3", "lateral_force")):
        a, b = results[0].joints[name][component], results[1].joints[name][component]
        assert float(jnp.max(jnp.abs(a - b))) > 1e-3 * float(jnp.max(jnp.abs(a))), name


def test_minimum_norm_multipliers_give_the_same_unique_reactions(model, variants):
    mech, _, _ = model
    sol, reference = next(iter(variants.values()))
    idx = np.arange(5, 101, 10)
    _, lam = jax.jit(
        jax.vmap(lambda t, q, qd: jaxmbs.accelerations_and_multipliers(mech, q, qd, t))
    )(sol.ts[idx], sol.q[idx], sol.qd[idx])
    r = jaxmbs.constraint_reactions(mech, sol.q[idx], lam, sol.ts[idx])
    for name in robot.SOLVABLE:
        assert_close(r.groups[name], reference.groups[name][idx], 0, 1e-8, name)
    assert_close(r.generalized, reference.generalized[idx], 0, 1e-8, "Cᵀλ")


def test_solvability_along_the_trajectory(model, variants):
    mech, _, _ = model
    sol, _ = next(iter(variants.values()))
    rng = np.random.default_rng(4)
    for k in rng.choice(len(sol.ts), size=20, replace=False):
        check_verdicts(jaxmbs.analyze_solvability(mech, sol.q[k], float(sol.ts[k])))
