"""The suspension study's gradient on the McPherson quarter car (issue 26) against central
differences (split from `test_quarter_car.py` so that pytest-xdist's workers, each given
whole modules, balance)."""

import pathlib
import sys
from functools import partial

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxmbs.models import mcpherson

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "experiments"))
import suspension_design as study  # noqa: E402

#: The gradient check's run: 0.4 s over the bump (x = 3–3.6 m at 12 m/s), at the study's
#: tolerance; the study checks the gradient over the whole road.
SHORT = np.linspace(0.0, 0.4, 81)


def test_objective_gradient_against_central_differences(record_property):
    """∂J/∂(k, c, z_B) through the equilibrium (implicit function theorem) and `simulate`
    (forward mode, one compilation for the three directions; tolerance 1e-10) against 5-point
    central differences of the compiled objective at tolerance 1e-12 with h = 1e-2 in the
    scaled design variables: 1e-6 relative, in norm. Measured: 1.0e-7; the differences at
    h = 3e-3 and 1e-3 agree with it to 2e-7 (no truncation error), but at tolerance 1e-10
    they carry the solver's noise, ~1e-8 in J, divided by h: 1.3e-6 (h = 1e-2) to 5.9e-6
    (h = 1e-3). (The differences' twelve values of J taken from the gradient's program,
    with the tolerance traced, cost more to run than J's own program costs to compile.)"""
    road = study.study_road()
    mech = mcpherson.quarter_car(road)  # no static point needed: the objective finds it
    x = jnp.asarray(study.X0)

    def short(x, **options):
        return study.objective(mech, road, x, ts=SHORT, **options)

    # Forward mode: reverse mode (the study's) compiles for ~2.5 min on this model, against
    # ~1 min; `test_reverse_replay.py` checks that the two modes agree.
    gradient = jax.jit(jax.jacfwd(lambda x: short(x, adjoint=diffrax.ForwardMode())))(x)
    fd = study.central_difference(jax.jit(partial(short, tol=1e-12)), np.asarray(study.X0), 1e-2)
    error = float(np.linalg.norm(np.asarray(gradient) - fd) / np.linalg.norm(fd))
    record_property("gradient", np.asarray(gradient).tolist())
    record_property("relative_error", error)
    assert float(jnp.min(jnp.abs(gradient))) > 1e-4  # every variable matters
    assert error < 1e-6, (gradient, fd)
