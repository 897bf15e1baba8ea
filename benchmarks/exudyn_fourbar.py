"""The four-bar against Exudyn's generalized-α: the same scheme, ρ∞ and constant step.

The four-bar of `jaxmbs.models.fourbar` (lengths, masses, J = m l²/12, gravity, the initial
state of `fourbar.initial_state`) built in Exudyn from `NodeRigidBody2D` / `ObjectRigidBody2D`
bodies in the same absolute coordinates (x, y, φ per link) and four `RevoluteJoint2D`
joints, gravity as a force at each centre of mass. Both sides integrate the index-3
equations by generalized-α (Chung & Hulbert; Exudyn's `timeIntegration.generalizedAlpha`
with `useIndex2Constraints = False`, `useNewmark = False`, its `spectralRadius` = ρ∞) at the
same constant step. Printed per step: the final crank angle of each against a tight
jaxmbs reference (Tsit5, rtol = atol = 1e-12) and against each other, |Φ| at the end (of
Exudyn's coordinates, by jaxmbs's constraints), wall time per run, and jaxmbs's compile
time (one program for every step: `dt0` is traced).

    pip install '.[exudyn]'
    python -m benchmarks.exudyn_fourbar
"""

from __future__ import annotations

import statistics
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import fourbar  # noqa: E402

from .core import compiled  # noqa: E402

T = 1.0
STEPS = (1e-3, 1e-4)
RHO_INF = 0.8
REPEATS = 7


def exudyn_fourbar(exu, q0: np.ndarray, qd0: np.ndarray, p: dict):
    """The four-bar as an Exudyn system (assembled), from consistent (q0, q̇0)."""
    from exudyn import itemInterface as items

    system = exu.SystemContainer()
    mbs = system.AddSystem()
    ground = mbs.AddObject(items.ObjectGround(referencePosition=[0.0, 0.0, 0.0]))
    bodies = []
    for k, (m, length) in enumerate(((p["m1"], p["l1"]), (p["m2"], p["l2"]), (p["m3"], p["l3"]))):
        node = mbs.AddNode(
            items.NodeRigidBody2D(
                referenceCoordinates=list(q0[3 * k : 3 * k + 3]),
                initialVelocities=list(qd0[3 * k : 3 * k + 3]),
            )
        )
        body = mbs.AddObject(
            items.ObjectRigidBody2D(mass=m, inertia=m * length**2 / 12, nodeNumber=node)
        )
        centre = mbs.AddMarker(items.MarkerBodyPosition(bodyNumber=body, localPosition=[0.0] * 3))
        mbs.AddLoad(items.LoadForceVector(markerNumber=centre, loadVector=[0.0, -m * p["g"], 0.0]))
        bodies.append((body, length))

    def point(body: int, x: float) -> int:
        return mbs.AddMarker(items.MarkerBodyPosition(bodyNumber=body, localPosition=[x, 0, 0]))

    def ground_point(x: float) -> int:
        return mbs.AddMarker(items.MarkerBodyRigid(bodyNumber=ground, localPosition=[x, 0, 0]))

    (crank, l1), (coupler, l2), (rocker, l3) = bodies
    pairs = (
        (ground_point(0.0), point(crank, -l1 / 2)),
        (point(crank, l1 / 2), point(coupler, -l2 / 2)),
        (point(coupler, l2 / 2), point(rocker, l3 / 2)),
        (point(rocker, -l3 / 2), ground_point(p["l0"])),
    )
    for markers in pairs:
        mbs.AddObject(items.RevoluteJoint2D(markerNumbers=list(markers)))
    mbs.Assemble()
    return system, mbs


def exudyn_run(exu, mbs, h: float) -> tuple[np.ndarray, float]:
    """Exudyn's index-3 generalized-α over [0, T] at the constant step h: the final absolute
    coordinates and the wall time of the solve."""
    settings = exu.SimulationSettings()
    integration = settings.timeIntegration
    integration.endTime = T
    integration.numberOfSteps = round(T / h)
    integration.verboseMode = 0
    integration.generalizedAlpha.spectralRadius = RHO_INF
    integration.generalizedAlpha.useIndex2Constraints = False
    integration.generalizedAlpha.useNewmark = False
    integration.generalizedAlpha.computeInitialAccelerations = True
    integration.newton.relativeTolerance = 1e-12
    integration.newton.absoluteTolerance = 1e-12
    settings.solution.file.write = False
    settings.show.computationTime = False
    settings.show.statistics = False
    start = time.perf_counter()
    mbs.SolveDynamic(settings)
    wall = time.perf_counter() - start
    reference = mbs.systemData.GetODE2Coordinates(configuration=exu.ConfigurationType.Reference)
    return np.asarray(reference) + np.asarray(mbs.systemData.GetODE2Coordinates()), wall


def main() -> None:
    try:
        import exudyn as exu
    except ImportError:
        sys.exit("exudyn is not installed: pip install '.[exudyn]' (benchmarks/exudyn_fourbar.py)")
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    p = {k: float(v) for k, v in mech.params.items()}
    reference = jaxmbs.simulate(mech, q0, qd0, (0.0, T), rtol=1e-12, atol=1e-12, max_steps=10**6)
    crank_ref = float(reference.q[-1, 2])

    def jax_run(h):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, T), solver=jaxmbs.GeneralizedAlpha(rho_inf=RHO_INF),
            stepsize_controller=diffrax.ConstantStepSize(), dt0=h, stabilization="none",
            max_steps=10**5, rank_rtol=None,
        )  # fmt: skip
        return sol.q[-1], sol.position_residual[-1], sol.stats["num_steps"]

    run, compile_s = compiled(jax_run, jnp.asarray(STEPS[0]))
    _, mbs = exudyn_fourbar(exu, np.asarray(q0), np.asarray(qd0), p)
    phi = jax.jit(lambda q: jaxmbs.position_residual(mech, q))
    print(
        f"four-bar, {T} s, ρ∞ = {RHO_INF}, index 3, constant step; jaxmbs {jaxmbs.__version__} "
        f"(compile {compile_s:.1f} s, one program for every step), Exudyn {exu.__version__}; "
        f"crank angle at {T} s: reference (Tsit5 1e-12) {crank_ref:.12f}"
    )
    for h in STEPS:
        # Each side's runs in a row: run right after an Exudyn solve, jaxmbs took 2.4× as
        # long at h = 1e-3 (25.9 against 10.9 ms on 2 cores; a thread of the other
        # library's still busy, or the caches).
        times = {"jaxmbs": [], "Exudyn": []}
        for _ in range(REPEATS):
            start = time.perf_counter()
            q_jax, phi_jax, steps = jax.block_until_ready(run(jnp.asarray(h)))
            times["jaxmbs"].append(time.perf_counter() - start)
        for _ in range(REPEATS):
            q_exu, wall = exudyn_run(exu, mbs, h)  # each solve starts from the initial state
            times["Exudyn"].append(wall)
        phi_exu = float(jnp.max(jnp.abs(phi(jnp.asarray(q_exu)))))
        crank = {"jaxmbs": float(q_jax[2]), "Exudyn": float(q_exu[2])}
        print(f"  h = {h:.0e} ({int(steps)} steps):")
        for name, value in crank.items():
            residual = float(phi_jax) if name == "jaxmbs" else phi_exu
            print(
                f"    {name:<6} crank {value:.12f}, − reference {value - crank_ref:+.2e}, "
                f"|Φ| {residual:.1e}, {statistics.median(times[name]) * 1e3:8.1f} ms per run"
            )
        print(f"    jaxmbs − Exudyn {crank['jaxmbs'] - crank['Exudyn']:+.2e}")


if __name__ == "__main__":
    main()
