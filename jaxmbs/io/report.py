"""What an import kept, changed and left out (`jaxmbs.io.from_mjcf(...).report`)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """One element of the file that the imported mechanism does not contain.

    `element` is its kind (`"contact"`, `"joint limit"`, `"friction loss"`, `"tendon"`,
    `"actuator"`, `"sensor"`, `"equality"`, …), `name` the file's name for it, `reason` why,
    and `changes_motion` whether leaving it out can change the motion (what `strict=True`
    refuses).
    """

    element: str
    name: str
    reason: str
    changes_motion: bool

    def __str__(self) -> str:
        return f"{self.element} {self.name!r}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class ImportReport:
    """The import's account: the source, the elements left out, and notes on what was
    interpreted differently from MuJoCo (e.g. equalities held exactly, not softly)."""

    source: str
    left_out: tuple[LeftOut, ...]
    notes: tuple[str, ...]

    def left_out_names(self, element: str) -> tuple[str, ...]:
        """Names of the left-out elements of one kind, e.g. `"joint limit"`."""
        return tuple(e.name for e in self.left_out if e.element == element)

    def __str__(self) -> str:
        lines = [f"imported {self.source}"]
        if self.left_out:
            lines.append("left out:")
            lines += [f"  - {e}" for e in self.left_out]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)
