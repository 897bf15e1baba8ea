"""The formulations by name: what `simulate(method=NAME)` looks up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import nullspace as ns
from .base import AbstractFormulation
from .kkt import KKT
from .nullspace import NullSpaceFormulation
from .partitioning import CoordinatePartitioning
from .wang_huston import BandedWangHuston, WangHuston

if TYPE_CHECKING:
    from ..model import Mechanism

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
#: The name of the automatic choice among them (`choose_formulation`), the default of
#: `simulate`.
AUTO = "auto"


def choose_formulation(mechanism: Mechanism | None) -> AbstractFormulation:
    """`method="auto"`: the formulation for a mechanism's static structure.

    The structure's algebra's `preferred_method`: `banded` (the range-space form on the
    independent rows, the structure's sparsity exploited) wherever the structure was analysed
    with its sparsity (the default of
    `Mechanism(reference_q=…)` and `with_structure`): measured on 2 CPU cores against `qr` at
    the same tolerance, 1.7× faster on the four-bar, 8× on a chain of 50 links, and it calls
    no LAPACK routine on small blocks, so batches vectorise on CPU and GPU alike; it handles
    redundant rows (through the independent ones) and Pfaffian rows like any other. `qr`
    otherwise: no sparsity known (a structure analysed without it), or no constraint rows at
    all (a free body: nothing for a range-space form to solve).
    """
    structure = None if mechanism is None else mechanism.structure
    if structure is None or structure.rank == 0:
        return FORMULATIONS["qr"]
    return FORMULATIONS[structure.algebra.preferred_method]


def get_formulation(
    method: str | AbstractFormulation, mechanism: Mechanism | None = None
) -> AbstractFormulation:
    """Look up a formulation by name, or pass an instance through; `"auto"` is chosen for
    the mechanism's structure (`choose_formulation`)."""
    if isinstance(method, AbstractFormulation):
        return method
    if method == AUTO:
        return choose_formulation(mechanism)
    try:
        return FORMULATIONS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}") from None
