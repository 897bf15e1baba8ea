"""Stiff mechanisms: an implicit method against an explicit one, and what its Jacobian costs.

`stiff_runs`: the stiff spring pendulum (`jaxmbs.models.spring_pendulum`) over 1 s with
`Tsit5` and `Kvaerno5` at rtol = atol = 1e-8 and 1e-10, and `jaxmbs.GeneralizedAlpha`
(ρ∞ = 0.8) at constant steps h = 1e-3 and 1e-4 (steps, compile and run time, error against
a 1e-12 reference).
`chain_runs`: the stiff chain (`CHAIN`: N = 50 links, n = 150, a torsional spring-damper
across every joint) over 0.5 s, generalized-α with the banded iteration matrix and its own
step control against Kvaerno5 with the exact Newton, at tolerances that bracket equal
accuracy (errors of the final q against Dopri8 at 1e-12).
`newton_iteration_cost`: one generalized-α Newton iteration (S assembled, factorised,
solved) on the stiff chain, banded against dense (`AbstractAlgebra.newton_system`).
`flyball_order`: generalized-α's order by step halving on the flyball governor
(`jaxmbs.models.flyball`, ρ∞ = 0.8, 0.2 s): errors of q, q̇, q̈ and λ against Kvaerno5 at
rtol = atol = 1e-12, |Φ| at every output, one compiled program for every step (`dt0` traced).
`flyball_batch`: a vmapped batch of B governors (initial spins 2π … 2.5π rad/s), generalized-α
at constant steps against Kvaerno5 (exact Newton, adaptive) at two tolerances: time per
sample, compile time, steps, error of the nominal sample (B = 1024 where JAX sees a GPU,
else 16).
`jacobian_cost`: one right-hand side of the reduced ODE (`qr`, all coordinates) against its
exact Jacobian by forward-mode autodiff (what Newton's method evaluates every iteration), on
chains of N links (n = 3N coordinates, a state of 2n): the cost per step and how it grows.

    python -m benchmarks.stiff
"""

from __future__ import annotations

import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.formulations import get_formulation  # noqa: E402
from jaxmbs.integrate.generalized_alpha import (  # noqa: E402
    GeneralizedAlpha,
    IndexThreeCoordinates,
    StepEquations,
    newton_system,
)
from jaxmbs.integrate.stabilization import NoStabilization  # noqa: E402
from jaxmbs.integrate.state_space import AllCoordinates  # noqa: E402
from jaxmbs.models import chain, flyball, spring_pendulum  # noqa: E402

from .core import compiled, median_time  # noqa: E402


def _row(mech, q0, qd0, t_span, reference, solver_name: str, tol: float, repeats: int,
         **options) -> dict:  # fmt: skip
    """One run's steps, compile and run time and final-state error against `reference` (the
    final q of a tight run), with no stabilisation and no rank check."""

    def solve(q0, qd0):
        sol = jaxmbs.simulate(
            mech, q0, qd0, t_span, max_steps=10**6, stabilization="none", rank_rtol=None,
            **options,
        )  # fmt: skip
        return sol.q[-1], sol.stats["num_steps"]

    run, compile_s = compiled(solve, q0, qd0)
    times = []
    for _ in range(repeats):  # the timed runs give the result as well (Kvaerno5 on the chain
        start = time.perf_counter()  # runs for minutes)
        q1, steps = jax.block_until_ready(run(q0, qd0))
        times.append(time.perf_counter() - start)
    return {
        "solver": solver_name, "tol": tol, "steps": int(steps), "compile_s": compile_s,
        "time_s": statistics.median(times), "error": float(jnp.max(jnp.abs(q1 - reference))),
    }  # fmt: skip


def stiff_runs(repeats: int = 3) -> dict:
    mech = spring_pendulum.spring_pendulum()
    q0, qd0 = spring_pendulum.initial_state(mech, rate=1.0)
    t_span = (0.0, 1.0)
    reference = jaxmbs.simulate(mech, q0, qd0, t_span, rtol=1e-12, atol=1e-12, max_steps=10**6)

    def row(solver_name: str, tol: float, **options) -> dict:
        return _row(mech, q0, qd0, t_span, reference.q[-1], solver_name, tol, repeats, **options)

    rows = [
        row(name, tol, solver=solver, rtol=tol, atol=tol)
        for tol in (1e-8, 1e-10)
        for name, solver in (("Tsit5", diffrax.Tsit5()), ("Kvaerno5", diffrax.Kvaerno5()))
    ]
    # generalized-α, constant step: error ≈ 3 h² here
    rows += [
        row(
            "GenAlpha",
            h,
            solver=jaxmbs.GeneralizedAlpha(rho_inf=0.8),
            stepsize_controller=diffrax.ConstantStepSize(),
            dt0=h,
        )  # fmt: skip
        for h in (1e-3, 1e-4)
    ]
    return {"model": "spring pendulum, 1 s", "runs": rows}


#: The stiff chain: N links, a torsional spring-damper (k N m/rad, c N m s/rad) across every
#: joint, released at rest, straight and horizontal (springs relaxed), for T s.
CHAIN = {"links": 50, "stiffness": 1e6, "damping": 100.0, "T": 0.5}


def _stiff_chain(links: int):
    mech = chain.chain(links, stiffness=CHAIN["stiffness"], damping=CHAIN["damping"])
    return mech, *chain.initial_state(mech, angle=np.pi / 2)


def chain_runs(ga_tols=(1e-6, 1e-7, 1e-8), kvaerno_tols=(1e-5,), repeats: int = 1) -> dict:
    """`CHAIN` (n = 150, 100 constraints): generalized-α (ρ∞ = 0.8, the banded iteration
    matrix, steps by its local error estimate) against Kvaerno5 with the exact Newton (the
    `qr` formulation's ODE, its dense Jacobian) at the tolerances given; errors of the final
    q against Dopri8 at rtol = atol = 1e-12 (whose step count shows the stiffness)."""
    mech, q0, qd0 = _stiff_chain(CHAIN["links"])
    t_span = (0.0, CHAIN["T"])
    reference = jaxmbs.simulate(
        mech, q0, qd0, t_span, rtol=1e-12, atol=1e-12, solver=diffrax.Dopri8(), max_steps=10**6
    )

    def row(solver_name: str, tol: float, solver) -> dict:
        return _row(
            mech, q0, qd0, t_span, reference.q[-1], solver_name, tol, repeats, solver=solver,
            rtol=tol, atol=tol,
        )  # fmt: skip

    rows = [row("GenAlpha", tol, jaxmbs.GeneralizedAlpha(rho_inf=0.8)) for tol in ga_tols]
    rows += [row("Kvaerno5", tol, diffrax.Kvaerno5()) for tol in kvaerno_tols]
    return {
        "model": f"chain N = {CHAIN['links']}, k = {CHAIN['stiffness']:.0e}, "
        f"c = {CHAIN['damping']:g}, {CHAIN['T']} s",
        "reference_steps": int(reference.stats["num_steps"]),
        "runs": rows,
    }


def _newton_iteration(mech, q0, qd0):
    """One Newton iteration of a generalized-α step (assemble and factorise S, solve for the
    correction) from the consistent start, as a function of x = (q̈, λ_I)."""
    equations = StepEquations(mech, GeneralizedAlpha(rho_inf=0.8).coefficients)
    space = IndexThreeCoordinates(get_formulation("qr"))
    y0, _ = space.initial_state(mech, q0, qd0, 0.0, mech.params, 1e-8)
    n, h = mech.n, 1e-3
    qdd = y0[2 * n : 3 * n]
    theta = (h, h, q0, qd0, qdd, qdd, mech.params, None)

    def iteration(x):
        r, solve = newton_system(equations, x, theta)
        return x - solve(r)

    return iteration, y0[2 * n :]


def newton_iteration_cost(links=(10, 50), repeats: int = 20) -> list[dict]:
    """Run and compile time of one Newton iteration of generalized-α on the stiff chain, with
    the banded iteration matrix (the structure's default) and the dense one."""
    rows = []
    for n_links in links:
        mech, q0, qd0 = _stiff_chain(n_links)
        dense = mech.replace_structure(jaxmbs.analyze_structure(mech, q0, sparsity=False))
        row = {"links": n_links, "unknowns": mech.n + mech.structure.rank}
        for name, m in (("banded", mech), ("dense", dense)):
            iteration, x = _newton_iteration(m, q0, qd0)
            run, row[f"{name}_compile_s"] = compiled(iteration, x)
            row[f"{name}_s"] = median_time(lambda run=run, x=x: run(x), repeats)
        rows.append(row)
    return rows


#: The governor's generalized-α runs: span, outputs (step ends of every step), the halved
#: steps, and from when q̇ (and q̈, λ) are compared: after the stiff springs' start-up
#: transient, which ρ∞ = 0.8 damps by ~0.8 per step.
FLYBALL = {
    "T": 0.2, "outputs": 21, "steps": (2e-3, 1e-3, 5e-4, 2.5e-4),
    "from": {"q": 0.0, "qd": 0.05, "qdd": 0.1, "multipliers": 0.1},
}  # fmt: skip


def _flyball_ga(mech, q0, qd0, h, **options) -> jaxmbs.Solution:
    """Generalized-α (ρ∞ = 0.8) on the governor over `FLYBALL`'s span at the constant step h."""
    return jaxmbs.simulate(
        mech, q0, qd0, (0.0, FLYBALL["T"]), solver=jaxmbs.GeneralizedAlpha(rho_inf=0.8),
        stepsize_controller=diffrax.ConstantStepSize(), dt0=h, stabilization="none",
        rank_rtol=None, max_steps=10**5, **options,
    )  # fmt: skip


def flyball_order() -> dict:
    """Step halving on the governor: each step's run time, max |Φ| over the outputs and the
    largest error of q, q̇, q̈, λ (from `FLYBALL["from"]` on) against Kvaerno5 at
    rtol = atol = 1e-12 (not a fine generalized-α run: its q̈ and λ are fixed by the
    positions only to ~ε|q|/β', 3e-4 in q̈ at h = 1e-5); the reference's final q."""
    mech = flyball.flyball()
    q0, qd0 = flyball.initial_state(mech)
    out = np.linspace(0.0, FLYBALL["T"], FLYBALL["outputs"])
    start = time.perf_counter()
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, FLYBALL["T"]), saveat=out, solver=diffrax.Kvaerno5(), rtol=1e-12,
        atol=1e-12, max_steps=10**6,
    )  # fmt: skip
    reference = (sol.q, sol.qd, sol.qdd, sol.multipliers)
    reference_s, reference_steps = time.perf_counter() - start, int(sol.stats["num_steps"])

    def solve(h):
        sol = _flyball_ga(mech, q0, qd0, h, saveat=out)
        return (sol.q, sol.qd, sol.qdd, sol.multipliers), sol.position_residual

    run, compile_s = compiled(solve, jnp.asarray(FLYBALL["steps"][0]))
    rows = []
    for h in FLYBALL["steps"]:
        start = time.perf_counter()
        outputs, phi = jax.block_until_ready(run(jnp.asarray(h)))
        row = {"h": h, "time_s": time.perf_counter() - start, "phi": float(jnp.max(phi))}
        for (name, since), x, x_ref in zip(
            FLYBALL["from"].items(), outputs, reference, strict=True
        ):
            row[name] = float(jnp.max(jnp.abs(x - x_ref)[out >= since]))
        rows.append(row)
    return {
        "compile_s": compile_s, "reference_steps": reference_steps,
        "reference_s": reference_s, "reference_q": sol.q[-1], "runs": rows,
    }  # fmt: skip


def flyball_batch(reference_q, batch: int | None = None, steps=(1e-3, 5e-4),
                  tols=(1e-6, 1e-8), repeats: int = 3) -> dict:  # fmt: skip
    """One vmapped batch of governors (initial spins 2π … 2.5π, the velocities of
    `flyball.initial_state` scaled), over `FLYBALL`'s span: generalized-α at the constant
    `steps` and Kvaerno5 (exact Newton) at `tols`, each one program over its step or
    tolerance (traced); time per sample, compile, the batch's largest step count and the
    nominal sample's final-q error against `reference_q` (`tol`: the step or tolerance,
    `time_s`: per sample)."""
    on_gpu = any(d.platform == "gpu" for d in jax.devices())
    batch = batch or (1024 if on_gpu else 16)
    mech = flyball.flyball()
    q0, qd0 = flyball.initial_state(mech)
    scales = jnp.linspace(1.0, 1.25, batch)

    def final(sol):
        return sol.q[-1], sol.stats["num_steps"]

    def ga(scale, h):
        return final(_flyball_ga(mech, q0, scale * qd0, h))

    def kvaerno(scale, tol):
        return final(
            jaxmbs.simulate(
                mech, q0, scale * qd0, (0.0, FLYBALL["T"]), solver=diffrax.Kvaerno5(), rtol=tol,
                atol=tol, stabilization="none", rank_rtol=None, max_steps=10**5,
            )
        )  # fmt: skip

    rows = []
    for name, fn, settings in (("GenAlpha", ga, steps), ("Kvaerno5", kvaerno, tols)):
        batched = jax.vmap(fn, in_axes=(0, None))
        run, compile_s = compiled(batched, scales, jnp.asarray(settings[0]))
        for setting in settings:
            x = jnp.asarray(setting)
            time_s = median_time(lambda run=run, x=x: run(scales, x), repeats)
            q1, n_steps = run(scales, x)
            rows.append({
                "solver": name, "tol": setting, "compile_s": compile_s,
                "time_s": time_s / batch, "steps": int(jnp.max(n_steps)),
                "error": float(jnp.max(jnp.abs(q1[0] - reference_q))),
            })  # fmt: skip
    return {"batch": batch, "device": jax.devices()[0].platform, "runs": rows}


def _field_cost(n_links: int, repeats: int) -> dict:
    mech = chain.chain(n_links)
    q0, qd0 = chain.initial_state(mech)
    field = AllCoordinates(get_formulation("qr")).vector_field(mech, NoStabilization())
    args = (mech.params, jnp.ones((), bool))
    y = jnp.concatenate([q0, qd0])
    rhs, _ = compiled(lambda y: field(0.0, y, args), y)
    jac, jac_compile = compiled(jax.jacfwd(lambda y: field(0.0, y, args)), y)
    t_rhs = median_time(lambda: rhs(y), repeats)
    t_jac = median_time(lambda: jac(y), repeats)
    return {
        "links": n_links, "n": mech.n, "state": 2 * mech.n, "rhs_s": t_rhs,
        "jacobian_s": t_jac, "ratio": t_jac / t_rhs, "jacobian_compile_s": jac_compile,
    }  # fmt: skip


def jacobian_cost(links=(5, 20, 50), repeats: int = 20) -> list[dict]:
    return [_field_cost(n_links, repeats) for n_links in links]


def _print_runs(rows: list[dict], per: str = "") -> None:
    """One line per run: solver, step (generalized-α at a constant step) or tolerance,
    steps, time (`per`: of what), compile, error."""
    for r in rows:
        setting = "h  " if r["solver"] == "GenAlpha" else "tol"
        print(
            f"  {r['solver']:<9} {setting} {r['tol']:.0e}: {r['steps']:>6} steps, "
            f"{r['time_s'] * 1e3:8.1f} ms{per}, compile {r['compile_s']:.1f} s, "
            f"error {r['error']:.1e}"
        )


def main() -> None:
    runs = stiff_runs()
    print(f"{runs['model']}:")
    _print_runs(runs["runs"])
    runs = chain_runs()
    print(f"{runs['model']} (Dopri8 at 1e-12: {runs['reference_steps']} steps):")
    for r in runs["runs"]:
        print(
            f"  {r['solver']:<9} tol {r['tol']:.0e}: {r['steps']:>6} steps, "
            f"{r['time_s'] * 1e3:8.1f} ms, compile {r['compile_s']:.1f} s, error {r['error']:.1e}"
        )
    print("one generalized-α Newton iteration (assemble S, factorise, solve), stiff chain:")
    for r in newton_iteration_cost():
        print(
            f"  N = {r['links']:>2} ({r['unknowns']} unknowns): banded "
            f"{r['banded_s'] * 1e6:8.1f} µs (compile {r['banded_compile_s']:.1f} s), dense "
            f"{r['dense_s'] * 1e6:8.1f} µs (compile {r['dense_compile_s']:.1f} s): "
            f"{r['dense_s'] / r['banded_s']:.1f}×"
        )
    order = flyball_order()
    print(
        f"flyball governor, generalized-α ρ∞ = 0.8, {FLYBALL['T']} s, step halving against "
        f"Kvaerno5 at 1e-12 ({order['reference_steps']} steps, {order['reference_s']:.0f} s "
        f"with its compile); compile {order['compile_s']:.1f} s, one program for every step; "
        "errors (slopes):"
    )
    previous = None
    for r in order["runs"]:
        cells = []
        for name in FLYBALL["from"]:
            slope = "" if previous is None else f" ({np.log2(previous[name] / r[name]):.2f})"
            cells.append(f"{name} {r[name]:.2e}{slope}")
        print(
            f"  h {r['h']:.2e}: {', '.join(cells)}; max |Φ| {r['phi']:.0e}, "
            f"{r['time_s'] * 1e3:.0f} ms"
        )
        previous = r
    batch = flyball_batch(order["reference_q"])
    print(f"flyball governor, vmapped batch of {batch['batch']} ({batch['device']}):")
    _print_runs(batch["runs"], " per sample")
    print("exact Jacobian of the reduced ODE (jacfwd) vs one right-hand side, chains:")
    for r in jacobian_cost():
        print(
            f"  N = {r['links']:>2} (state {r['state']:>3}): RHS {r['rhs_s'] * 1e6:8.1f} µs, "
            f"Jacobian {r['jacobian_s'] * 1e6:9.1f} µs ({r['ratio']:.0f}×), "
            f"compile {r['jacobian_compile_s']:.1f} s"
        )


if __name__ == "__main__":
    main()
