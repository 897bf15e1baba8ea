"""Bring your model: MJCF and URDF mechanisms imported through MuJoCo's compiler.

`from_mjcf` / `from_urdf` need the optional `mujoco` package (`pip install 'jaxmbs[mjcf]'`);
importing `jaxmbs.io` does not import it.
"""

from .mjcf import Connect as Connect
from .mjcf import ImportedModel as ImportedModel
from .mjcf import Weld as Weld
from .mjcf import from_mjcf as from_mjcf
from .mjcf import from_urdf as from_urdf
from .report import ImportReport as ImportReport
from .report import LeftOut as LeftOut
from .tree import Tree as Tree
