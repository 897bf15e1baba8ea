"""Formulations: q̈ (and λ) from (M, Q, C, Γ) — one abstract base (`base`), one file per
family (`kkt`, `nullspace`, `partitioning`, `wang_huston`; the sparse kernels of `banded` are
the structure's algebra, `jaxmbs.kinematics.algebra`),
the registry behind `simulate(method=...)`; the closing-condition equations (`closing`)."""

from . import nullspace as nullspace
from .base import AbstractFactorizedFormulation as AbstractFactorizedFormulation
from .base import AbstractFormulation as AbstractFormulation
from .closing import ClosingTerms as ClosingTerms
from .closing import ClosingVariant as ClosingVariant
from .closing import closing_terms as closing_terms
from .closing import minimal_equations as minimal_equations
from .kkt import KKT as KKT
from .nullspace import NullSpaceFormulation as NullSpaceFormulation
from .partitioning import CoordinatePartitioning as CoordinatePartitioning
from .registry import AUTO as AUTO
from .registry import METHODS as METHODS
from .registry import choose_formulation as choose_formulation
from .registry import get_formulation as get_formulation
from .wang_huston import BandedWangHuston as BandedWangHuston
from .wang_huston import WangHuston as WangHuston
