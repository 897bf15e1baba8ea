"""Reusable builders: joints write Φ (or ψ) only, force elements a scalar deformation and
their law; autodiff does the rest."""

from . import forces as forces
from . import orientation as orientation
from . import particles as particles
from . import planar as planar
from . import rolling as rolling
from . import spatial as spatial
from ._common import cos_sin as cos_sin
