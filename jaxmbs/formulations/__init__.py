"""Formulations: q̈ (and λ) from (M, Q, C, Γ) — one abstract base, one file per family, the
registry behind `simulate(method=...)`; the closing-condition equations."""

from . import banded as banded
from . import nullspace as nullspace
from .base import KKT as KKT
from .base import METHODS as METHODS
from .base import AbstractFactorizedFormulation as AbstractFactorizedFormulation
from .base import AbstractFormulation as AbstractFormulation
from .base import BandedWangHuston as BandedWangHuston
from .base import CoordinatePartitioning as CoordinatePartitioning
from .base import NullSpaceFormulation as NullSpaceFormulation
from .base import WangHuston as WangHuston
from .base import expand_multipliers as expand_multipliers
from .base import get_formulation as get_formulation
from .base import independent as independent
from .base import reaction_multipliers as reaction_multipliers
from .closing import ClosingTerms as ClosingTerms
from .closing import ClosingVariant as ClosingVariant
from .closing import closing_terms as closing_terms
from .closing import minimal_equations as minimal_equations
