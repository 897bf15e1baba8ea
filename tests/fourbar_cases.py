"""Set-up shared by test_partitioning.py and test_closing.py: the four-bar in relative
coordinates (Blajer et al. 1993/1994, Fig. 2) in its two link sets.

Every run uses the same tolerance, output count and mechanism object (the second link set
enters as parameters), so one compilation serves all the runs of a formulation; the cached
set-up is simulated once per session.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.models import fourbar_relative as fr

TOL = 1e-12  # integration tolerance of every four-bar run
N_OUT = 201  # output times of every four-bar run


@functools.cache
def fig3():
    """Fig. 3 linkage (crank at O1, α1 never singular), 10 s of QR reference."""
    mech = fr.fourbar_relative()
    q0, qd0 = fr.initial_state(mech, 0.3, 3.0)
    ts = jnp.linspace(0.0, 10.0, N_OUT)
    qr = jaxmbs.simulate(mech, q0, qd0, (0.0, 10.0), saveat=ts, rtol=TOL, atol=TOL, throw=False)
    return mech, q0, qd0, ts, qr


@functools.cache
def crank_at_o4():
    """The short link at O4 turns fully: sin α3 = 0 twice a turn, singular for α1.

    Returns the Fig. 3 mechanism object, the parameters of this link set, q0 and the q̇0 of a
    unit rocker speed (q̇0 is linear in it).
    """
    mech = fig3()[0]
    params = dict(fr.CRANK_AT_O4)
    q0, unit_qd = fr.initial_state(mech.replace_params(params), 2.8, 1.0)
    return mech, params, q0, unit_qd


def relative_energy_drift(mech, sol, params) -> float:
    """max |E − E(0)| over the largest kinetic energy (E's zero level is arbitrary)."""
    kinetic = jax.vmap(lambda q, qd: 0.5 * qd @ mech.mass_matrix(q, params) @ qd)(sol.q, sol.qd)
    energy = np.asarray(sol.energy)
    return float(np.max(np.abs(energy - energy[0])) / np.max(kinetic))


def wrapped(x):
    """Angles reduced to (−π, π]: closing conditions return principal values."""
    return np.angle(np.exp(1j * np.asarray(x)))
