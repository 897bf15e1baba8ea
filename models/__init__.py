"""Reference mechanisms, importable as `jaxmbs.models.<name>`.

`MODELS` maps a name to a factory returning `(mechanism, q0, qd0)`: the mechanism with its
default parameters and a consistent initial state (used by the `jaxmbs` command line).
"""

from __future__ import annotations

from collections.abc import Callable

from . import (
    chain,
    fourbar,
    fourbar_relative,
    mcpherson,
    mobile_robot,
    pendulum,
    platform,
    slider_crank,
)


def _pendulum():
    mech = pendulum.mathematical_pendulum()
    return (mech, *pendulum.initial_state(mech, 1.0))


def _physical_pendulum():
    mech = pendulum.physical_pendulum()
    return (mech, *pendulum.initial_state(mech, 1.0))


def _fourbar(redundant=False):
    mech = fourbar.fourbar(redundant=redundant)
    return (mech, *fourbar.initial_state(mech))


def _fourbar_relative():
    mech = fourbar_relative.fourbar_relative()
    return (mech, *fourbar_relative.initial_state(mech, 0.3, 3.0))


def _slider_crank(driven=False):
    mech = slider_crank.slider_crank(driven=driven)
    return (mech, *slider_crank.initial_state(mech))


def _mobile_robot():
    mech = mobile_robot.mobile_robot()
    return (mech, *mobile_robot.initial_state(mech))


def _platform(coordinates="absolute"):
    mech = getattr(platform, coordinates)()
    return (mech, *platform.initial_state(mech))


def _mcpherson(redundant=False):
    mech = mcpherson.mcpherson(redundant)
    return (mech, *mcpherson.initial_state(mech))


def _chain(n_links=5):
    mech = chain.chain(n_links)
    return (mech, *chain.initial_state(mech))


MODELS: dict[str, Callable] = {
    "pendulum": _pendulum,
    "physical-pendulum": _physical_pendulum,
    "fourbar": _fourbar,
    "fourbar-redundant": lambda: _fourbar(redundant=True),
    "fourbar-relative": _fourbar_relative,
    "slider-crank": _slider_crank,
    "slider-crank-driven": lambda: _slider_crank(driven=True),
    "chain": _chain,
    "mobile-robot": _mobile_robot,
    "platform": _platform,
    "platform-particles": lambda: _platform("particles"),
    "platform-joint": lambda: _platform("joint"),
    "mcpherson-simplified": _mcpherson,
    "mcpherson-redundant": lambda: _mcpherson(redundant=True),
}
