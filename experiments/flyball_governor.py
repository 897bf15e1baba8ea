"""The flyball governor (`jaxmbs.models.flyball`): a stiff spatial mechanism solved with an
implicit method, against an explicit one.

Prints, for the first second, the steps and wall time of `Kvaerno5` and `Tsit5` at the same
tolerance and their largest difference in the slider height; then runs 10 s with `Kvaerno5`,
checks the energy balance (kinetic + potential + dissipated) and draws the slider height.

    python experiments/flyball_governor.py [--out experiments/results/flyball] [--rtol 1e-8]
"""

from __future__ import annotations

import argparse
import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.integrate import cumulative_simpson  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import flyball  # noqa: E402


def run(mech, q0, qd0, t1: float, n_out: int, solver, tol: float):
    ts = jnp.linspace(0.0, t1, n_out)
    start = time.perf_counter()
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, t1), saveat=ts, solver=solver, rtol=tol, atol=tol, max_steps=10**6
    )
    sol.q.block_until_ready()
    return sol, time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("experiments/results/flyball")
    )
    parser.add_argument("--rtol", type=float, default=1e-8, help="rtol = atol (default 1e-8)")
    args = parser.parse_args(argv)

    mech = flyball.flyball()
    q0, qd0 = flyball.initial_state(mech)
    print("first second, rtol = atol =", args.rtol)
    first = {}
    for name, solver in (("Kvaerno5", diffrax.Kvaerno5()), ("Tsit5", diffrax.Tsit5())):
        sol, seconds = run(mech, q0, qd0, 1.0, 201, solver, args.rtol)
        first[name] = sol
        print(
            f"  {name:9s} {int(sol.stats['num_steps']):7d} steps  {seconds:6.1f} s with compilation"
        )
    gap = np.max(
        np.abs(flyball.slider_height(first["Kvaerno5"].q) - flyball.slider_height(first["Tsit5"].q))
    )
    print(f"  slider height, largest difference: {gap:.2e} m")

    sol, seconds = run(mech, q0, qd0, 10.0, 4001, diffrax.Kvaerno5(), args.rtol)
    ts = np.asarray(sol.ts)
    work = cumulative_simpson(np.asarray(jaxmbs.element_power(mech, sol)), x=ts, initial=0)
    energy = np.asarray(sol.energy)
    balance = np.max(np.abs(energy - energy[0] - work)) / np.max(np.abs(energy))
    print(f"10 s with Kvaerno5: {int(sol.stats['num_steps'])} steps, {seconds:.1f} s; "
          f"dissipated {-work[-1]:.4e} J, energy balance {balance:.1e} (relative)")  # fmt: skip

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(ts, flyball.slider_height(sol.q))
    ax.set_xlabel("t [s]")
    ax.set_ylabel("slider height z [m]")
    ax.set_title(f"Flyball governor (Kvaerno5, rtol = atol = {args.rtol:g})")
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"), dpi=120)
    print("wrote", args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
