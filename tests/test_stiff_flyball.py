"""The stiff spatial flyball governor: an implicit solver against an explicit one (split from
`test_stiff.py` so that pytest-xdist's workers, each given whole modules, balance)."""

import diffrax
import numpy as np
from scipy.integrate import cumulative_simpson

import jaxmbs
from jaxmbs.models import flyball


def test_flyball_governor_implicit_against_explicit():
    """The stiff spatial governor (Euler-parameter bodies, K = 8e5 N/m, C = 4e4 N s/m) over
    0.3 s at rtol = atol = 1e-8: Kvaerno5 in far fewer steps, the same slider motion, and
    kinetic + potential + dissipated energy constant."""
    mech = flyball.flyball()
    q0, qd0 = flyball.initial_state(mech)
    ts = np.linspace(0.0, 0.3, 601)
    runs = {
        name: jaxmbs.simulate(
            mech,
            q0,
            qd0,
            (0.0, 0.3),
            saveat=ts,
            solver=solver,
            rtol=1e-8,
            atol=1e-8,
            max_steps=100_000,
        )  # fmt: skip
        for name, solver in (("implicit", diffrax.Kvaerno5()), ("explicit", diffrax.Tsit5()))
    }
    steps = {name: int(sol.stats["num_steps"]) for name, sol in runs.items()}
    assert 10 * steps["implicit"] <= steps["explicit"], steps
    height = {name: flyball.slider_height(sol.q) for name, sol in runs.items()}
    assert np.ptp(height["explicit"]) > 0.01  # the slider moves
    assert np.max(np.abs(height["implicit"] - height["explicit"])) < 1e-6
    for sol in runs.values():
        work = cumulative_simpson(np.asarray(jaxmbs.element_power(mech, sol)), x=ts, initial=0)
        energy = np.asarray(sol.energy)
        assert np.max(np.abs(energy - energy[0] - work)) < 1e-6 * np.max(np.abs(energy))
