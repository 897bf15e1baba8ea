"""The stiff spatial flyball governor: an implicit solver against an explicit one (split from
`test_stiff.py` so that pytest-xdist's workers, each given whole modules, balance), and
generalized-α's order by step halving."""

import diffrax
import jax
import jax.numpy as jnp
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


#: Generalized-α on the governor: run length, outputs every 0.01 s (step ends of every step
#: below), the halved steps, and the reference's step (1/5 of the finest: its error, 1/25 of
#: the finest run's, raises the slope by log2(0.99/0.96) = 0.045).
GA_T = 0.1
GA_OUT = np.linspace(0.0, GA_T, 11)
GA_STEPS = (1e-3, 5e-4)
GA_REFERENCE_STEP = 1e-4


def test_flyball_generalized_alpha_order_two():
    """Step halving of generalized-α (ρ∞ = 0.8, the banded iteration matrix) on the stiff
    governor over 0.1 s, against its own run at h = 1e-4, all from one compiled program (the
    step is traced): the global error of q falls by 4 per halving, and that of q̇ after the
    stiff springs' start-up transient (t ≥ 0.05 s); |Φ| at round-off at every output (step
    ends) with no stabilisation. Three halvings over 0.2 s against Kvaerno5 at 1e-12, q̈ and
    λ too: `python -m benchmarks.stiff` (`flyball_order`)."""
    mech = flyball.flyball()
    q0, qd0 = flyball.initial_state(mech)

    @jax.jit
    def run(h):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, GA_T), saveat=GA_OUT, stabilization="none", dt0=h,
            solver=jaxmbs.GeneralizedAlpha(rho_inf=0.8),
            stepsize_controller=diffrax.ConstantStepSize(), max_steps=10_000,
        )  # fmt: skip
        successful = sol.result == jaxmbs.RESULTS.successful
        return sol.q, sol.qd, sol.position_residual, successful

    q_ref, qd_ref, phi, successful = run(jnp.asarray(GA_REFERENCE_STEP))
    worst_phi, errors = [float(np.max(phi))], {"q": [], "qd": []}
    assert bool(successful)
    late = GA_OUT >= 0.05
    for h in GA_STEPS:
        q, qd, phi, successful = run(jnp.asarray(h))
        assert bool(successful)
        worst_phi.append(float(np.max(phi)))
        errors["q"].append(float(np.max(np.abs(q - q_ref))))
        errors["qd"].append(float(np.max(np.abs(qd - qd_ref)[late])))
    slopes = {name: float(np.log2(e[0] / e[1])) for name, e in errors.items()}
    print(f"errors {errors}, slopes {slopes}; max |Φ| (reference first) {worst_phi}")
    assert all(1.8 < slope < 2.3 for slope in slopes.values()), slopes
    assert errors["q"][-1] < 1e-6
    assert max(worst_phi) < 1e-14
