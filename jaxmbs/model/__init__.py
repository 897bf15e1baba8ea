"""The model: the `Mechanism` contract, joints and bodies that write its functions, and
coordinate maps (first stage of the pipeline model → kinematics → formulations → integrate →
analysis)."""

from . import inertia as inertia
from . import joints as joints
from .maps import map_coordinates as map_coordinates
from .mechanism import Mechanism as Mechanism
