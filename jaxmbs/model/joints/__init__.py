"""Reusable constraint builders: joints write Φ (or ψ) only; autodiff does the rest."""

from . import orientation as orientation
from . import particles as particles
from . import planar as planar
from . import spatial as spatial
from ._common import cos_sin as cos_sin
