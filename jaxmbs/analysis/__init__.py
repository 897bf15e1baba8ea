"""Analysis of a mechanism and its motion: static equilibrium, linearisation, constraint
reactions, force-element forces, solvability of the reactions with redundant constraints,
elimination of redundant rows, labelled export (xarray, netCDF, CSV) and pictures of the
motion."""

from .animation import animate as animate
from .animation import snapshot as snapshot
from .elements import element_forces as element_forces
from .elements import element_power as element_power
from .elements import element_work as element_work
from .elimination import RowElimination as RowElimination
from .elimination import eliminate_rows as eliminate_rows
from .energy import conserves_energy as conserves_energy
from .energy import energy_rate as energy_rate
from .equilibrium import equilibrium as equilibrium
from .equilibrium import equilibrium_multipliers as equilibrium_multipliers
from .export import monte_carlo_to_xarray as monte_carlo_to_xarray
from .export import to_xarray as to_xarray
from .export import write_csv as write_csv
from .linearization import Linearization as Linearization
from .linearization import linearize as linearize
from .reactions import Reactions as Reactions
from .reactions import constraint_reactions as constraint_reactions
from .reactions import physical_reactions as physical_reactions
from .reactions import solution_reactions as solution_reactions
from .solvability import GroupSolvability as GroupSolvability
from .solvability import Solvability as Solvability
from .solvability import analyze_solvability as analyze_solvability
