"""The benchmark bicycle's nonlinear motion against its linearisation about upright straight
running (`models/bicycle.py`): at 5 m/s (self-stable: the weave decays) and at 3 m/s (below
the weave speed 4.29 m/s: the weave grows), from a lean-rate kick ε.

The reduced state δx = (lean, steer; their rates, the rear wheel's rate − v/r_R) of the
nonlinear run is compared with the linear prediction δx(t) = exp(A t) δx(0), A the state
matrix of `jaxmbs.linearize` about the steady motion (the cyclic coordinates x, y, yaw and
the wheel angles left out). The initial state is made consistent by `jaxmbs.assemble`
(the kick's dependent rates from the no-slip rows), and δx(0) is read from it. The nonlinear
terms are of second order in ε, so the largest difference over the run, divided by ε, must
fall tenfold when ε does (at 3 m/s with kicks small enough that the grown weave stays
small):

    python experiments/bicycle_nonlinear.py
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import bicycle  # noqa: E402

T = 4.0
TS = np.linspace(0.0, T, 81)
REDUCED = ("lean", "steer")  # positions; rates: lean, steer, rear_wheel
#: Lean-rate kicks (rad/s) per speed: at 3 m/s the weave grows ~e^{1.7 t}, ~900× over the
#: run, so its kicks are smaller, to stay in the range where second order is the error.
KICKS = {5.0: (1e-2, 1e-3), 3.0: (1e-4, 1e-5)}


def run(mech, v: float, eps: float) -> dict:
    """The nonlinear run and the linear prediction of one kick; errors relative to ε."""
    theta, rates = bicycle.upright_state(mech, v)
    lin = jaxmbs.linearize(
        mech, theta, rates, cyclic=bicycle.CYCLIC, positions=REDUCED,
        velocities=("lean", "steer", "rear_wheel"),
    )  # fmt: skip
    index = {name: i for i, name in enumerate(mech.coordinate_names)}
    kicked = rates.at[index["lean"]].add(eps)
    q0, qd0 = jaxmbs.assemble(mech, theta, kicked)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, T), saveat=TS, rtol=1e-11, atol=1e-11)
    assert bool(sol.successful), sol.result

    def reduced(q, qd):
        return jnp.stack([
            q[..., index["lean"]], q[..., index["steer"]], qd[..., index["lean"]],
            qd[..., index["steer"]], qd[..., index["rear_wheel"]] - v / mech.params["rR"],
        ], axis=-1)  # fmt: skip

    x0 = np.asarray(reduced(q0, qd0))
    A = np.asarray(lin.A)
    linear = np.stack([scipy.linalg.expm(A * t) @ x0 for t in TS])
    nonlinear = np.asarray(reduced(sol.q, sol.qd))
    lean = np.abs(nonlinear[:, 0])
    return {
        "v": v, "eps": eps,
        "lean_amplitude_start_end": (float(np.max(lean[:20])), float(np.max(lean[-20:]))),
        "difference_over_eps": float(np.max(np.abs(nonlinear - linear)) / eps),
        "steps": int(sol.stats["num_steps"]),
    }  # fmt: skip


def main() -> None:
    mech = bicycle.bicycle()
    for v, kicks in KICKS.items():
        eigenvalues = np.round(np.asarray(bicycle.lean_steer_eigenvalues(mech, v)), 4)
        print(f"v = {v} m/s, eigenvalues {eigenvalues}")
        for eps in kicks:
            r = run(mech, v, eps)
            start, end = r["lean_amplitude_start_end"]
            difference = r["difference_over_eps"]
            print(
                f"  ε = {eps:.0e}: max |δx_nonlinear − δx_linear| / ε = {difference:.2e}; "
                f"|lean| first second {start:.2e}, last second {end:.2e}; {r['steps']} steps"
            )


if __name__ == "__main__":
    main()
