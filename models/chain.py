"""Planar N-link pendulum chain in absolute coordinates (n = 3N, m = 2N, N degrees of freedom).

N identical links (length l, mass m, J = m l²/12) along their local x axes, link 0 pinned
to the ground at the origin, link k pinned to link k−1; gravity along −y. Used for scaling.
With `stiffness` or `damping`, a torsional spring-damper across every joint (free angle 0:
the links straight), which couples neighbouring links in the forces' Jacobians.
"""

from __future__ import annotations

import numpy as np

import jaxmbs
from jaxmbs.model.joints import forces, planar

from ._cache import cached


@cached
def chain(
    n_links: int = 5,
    length: float = 1.0,
    mass: float = 1.0,
    g: float = 9.81,
    stiffness: float = 0.0,
    damping: float = 0.0,
) -> jaxmbs.Mechanism:
    """The chain; params {"l", "m", "g"} shared by all links, and {"k", "c"} (N m/rad,
    N m s/rad) of the joints' spring-dampers where `stiffness` or `damping` is not zero."""
    if n_links < 1:
        raise ValueError(f"n_links must be at least 1, got {n_links}")
    params = {"l": length, "m": mass, "g": g}
    elements = []
    if stiffness or damping:
        params.update(k=stiffness, c=damping)
        elements = [
            forces.RotationalSpringDamper(
                f"S{k}", stiffness="k", damping="c", body_i=k - 1 if k else None, body_j=k
            )
            for k in range(n_links)
        ]

    def tip(sign):
        return lambda p: (sign * p["l"] / 2, 0.0)

    bodies = [
        planar.Body(f"link{k}", "m", lambda p: p["m"] * p["l"] ** 2 / 12) for k in range(n_links)
    ]
    joints = [planar.Revolute("J0", 0, tip(-1))]
    joints += [planar.Revolute(f"J{k}", k - 1, tip(1), k, tip(-1)) for k in range(1, n_links)]
    mech = planar.planar_mechanism(
        bodies, joints, params, gravity=lambda p: (0.0, -p["g"]), elements=elements
    )
    return mech.with_structure(configuration(n_links, length, np.pi / 4 + 0.1 * np.arange(n_links)))


def configuration(n_links: int, length: float, angles) -> np.ndarray:
    """Chain with link k at angle `angles[k]` from the downward vertical."""
    phi = -np.pi / 2 + np.broadcast_to(np.asarray(angles, float), (n_links,))
    ends = np.concatenate([[0.0 + 0j], np.cumsum(length * np.exp(1j * phi))])
    mid = (ends[:-1] + ends[1:]) / 2
    return np.stack([mid.real, mid.imag, phi], axis=1).reshape(-1)


def initial_state(mechanism: jaxmbs.Mechanism, angle: float = np.pi / 4):
    """At rest with every link at `angle` from the downward vertical."""
    n_links = mechanism.n // 3
    q = configuration(n_links, float(mechanism.params["l"]), angle)
    return jaxmbs.assemble(mechanism, q, np.zeros(mechanism.n))
