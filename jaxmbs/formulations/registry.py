"""The formulations by name: what `simulate(method=NAME)` looks up."""

from __future__ import annotations

from . import nullspace as ns
from .base import AbstractFormulation
from .kkt import KKT
from .nullspace import NullSpaceFormulation
from .partitioning import CoordinatePartitioning
from .wang_huston import BandedWangHuston, WangHuston

#: The formulations by name (`simulate(..., method=NAME)`), in the order of Pękal–Frączek 2016.
FORMULATIONS: dict[str, AbstractFormulation] = {
    f.name: f
    for f in (
        KKT(),
        NullSpaceFormulation(ns.QR()),
        NullSpaceFormulation(ns.SVD()),
        NullSpaceFormulation(ns.ZeroEigenvalue()),
        NullSpaceFormulation(ns.PUTDHouseholder()),
        NullSpaceFormulation(ns.PUTDGauss()),
        CoordinatePartitioning(),
        WangHuston(),
        BandedWangHuston(),
    )
}
METHODS: tuple[str, ...] = tuple(FORMULATIONS)


def get_formulation(method: str | AbstractFormulation) -> AbstractFormulation:
    """Look up a formulation by name, or pass an instance through."""
    if isinstance(method, AbstractFormulation):
        return method
    try:
        return FORMULATIONS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}") from None
