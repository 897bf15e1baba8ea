"""Stiff mechanisms: an implicit method against an explicit one, and what its Jacobian costs.

`stiff_runs`: the stiff spring pendulum (`jaxmbs.models.spring_pendulum`) over 1 s with
`Tsit5` and `Kvaerno5` at rtol = atol = 1e-8 and 1e-10, and `jaxmbs.GeneralizedAlpha`
(ρ∞ = 0.8) at constant steps h = 1e-3 and 1e-4 (steps, compile and run time, error against
a 1e-12 reference; for generalized-α also the size of the solve's HLO text).
`jacobian_cost`: one right-hand side of the reduced ODE (`qr`, all coordinates) against its
exact Jacobian by forward-mode autodiff (what Newton's method evaluates every iteration), on
chains of N links (n = 3N coordinates, a state of 2n): the cost per step and how it grows.

    python -m benchmarks.stiff
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.formulations import get_formulation  # noqa: E402
from jaxmbs.integrate.stabilization import NoStabilization  # noqa: E402
from jaxmbs.integrate.state_space import AllCoordinates  # noqa: E402
from jaxmbs.models import chain, spring_pendulum  # noqa: E402

from .core import compiled, median_time  # noqa: E402


def stiff_runs(repeats: int = 3) -> dict:
    mech = spring_pendulum.spring_pendulum()
    q0, qd0 = spring_pendulum.initial_state(mech, rate=1.0)
    t_span = (0.0, 1.0)
    reference = jaxmbs.simulate(mech, q0, qd0, t_span, rtol=1e-12, atol=1e-12, max_steps=10**6)

    def row(solver_name: str, tol: float, **options) -> dict:
        """One run's steps, compile and run time and final-state error (no stabilisation, no
        rank check)."""

        def solve(q0, qd0):
            sol = jaxmbs.simulate(
                mech, q0, qd0, t_span, max_steps=10**6, stabilization="none", rank_rtol=None,
                **options,
            )  # fmt: skip
            return sol.q[-1], sol.stats["num_steps"]

        run, compile_s = compiled(solve, q0, qd0)
        q1, steps = run(q0, qd0)
        return {
            "solver": solver_name, "tol": tol, "steps": int(steps), "compile_s": compile_s,
            "time_s": median_time(lambda: run(q0, qd0), repeats),
            "error": float(jnp.max(jnp.abs(q1 - reference.q[-1]))),
        }  # fmt: skip

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


def main() -> None:
    runs = stiff_runs()
    print(f"{runs['model']}:")
    for r in runs["runs"]:
        setting = "h  " if r["solver"] == "GenAlpha" else "tol"
        print(
            f"  {r['solver']:<9} {setting} {r['tol']:.0e}: {r['steps']:>6} steps, "
            f"{r['time_s'] * 1e3:8.1f} ms, compile {r['compile_s']:.1f} s, error {r['error']:.1e}"
        )
    print("exact Jacobian of the reduced ODE (jacfwd) vs one right-hand side, chains:")
    for r in jacobian_cost():
        print(
            f"  N = {r['links']:>2} (state {r['state']:>3}): RHS {r['rhs_s'] * 1e6:8.1f} µs, "
            f"Jacobian {r['jacobian_s'] * 1e6:9.1f} µs ({r['ratio']:.0f}×), "
            f"compile {r['jacobian_compile_s']:.1f} s"
        )


if __name__ == "__main__":
    main()
