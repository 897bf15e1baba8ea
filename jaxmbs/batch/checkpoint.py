"""Resumable Monte Carlo output: one NPZ file per finished chunk, written atomically, each
with its checksum.

A checkpoint directory holds `manifest.json` and, per finished chunk, the file
`chunk-SSSSSSSSS-EEEEEEEEE.npz` (named by its first and last sample index) and its checksum
record `chunk-SSSSSSSSS-EEEEEEEEE.sha256`. Every file is written to a temporary name in the
same directory, flushed to disk and renamed (`os.replace`, atomic on POSIX file systems), so
a run killed at any moment leaves only whole files (and at most a stray `.chunk-….tmp` per
killed writer, which nothing reads).

**The manifest** holds a fingerprint of the study: SHA-256 digests of the mechanism (its
static description, functions by module, qualified name and code), of every input (each
array's dtype, shape and bytes), of each time argument (`times.t_span`, `times.saveat`),
of each option (simulate's keyword arguments such as `options.rtol`, the response function,
what is kept), of the chunking and of the numerics (float width, JAX version, platform). A
call with the same arguments finds the manifest equal and reads the finished chunks instead
of computing them; a call with different ones is refused, naming the items that differ
(`options.rtol`, `times.saveat`, …). The manifest is written once, when the directory is
new, and never changed afterwards.

**The checksum records.** Under `jax.distributed` several processes write chunks into one
directory at once, so no file is shared between writers: the process that writes a chunk
file writes its checksum record after it, a small JSON object
`{"format", "study", "file", "sha256", "bytes"}` holding the SHA-256 of the chunk file's
bytes, and every reader checks a chunk file against its record before it trusts it. Every
chunk file also repeats the study's fingerprint and its sample range. A chunk file without
its record (its writer was killed between the two renames, or the file was copied from
elsewhere), with a record of another study, with other bytes than recorded (rewritten,
truncated, emptied, bit-flipped), or unreadable as this study's NPZ file is *damaged*: it
is computed again with a warning naming the file and why (`on_damaged="recompute"`), or
refused with a `ValueError` naming them (`on_damaged="raise"`). Files are NPZ and JSON,
never pickles.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import inspect
import json
import os
import re
import tempfile
import types
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, Literal

import jax
import numpy as np

#: The format tag of the manifest and of the checksum records.
FORMAT = "jaxmbs.monte_carlo.checkpoint/2"
MANIFEST = "manifest.json"
#: What to do with a damaged chunk file (module notes): compute it again, or refuse.
ON_DAMAGED = ("recompute", "raise")

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def fingerprint(parts: Mapping[str, Any]) -> dict[str, str]:
    """SHA-256 hex digests of a study's parts (see [`describe`][]).

    **Arguments:**

    - `parts`: part name → value. A part that is a mapping is digested item by item, under
      the names `part.item` (e.g. `options.rtol`), so that a refused call can name the item
      that differs; any other part is digested whole.

    **Returns:** name → digest, and `"study"`: the digest of all of them.
    """
    items = {}
    for part, value in parts.items():
        if isinstance(value, Mapping):
            items.update({f"{part}.{key}": item for key, item in value.items()})
        else:
            items[part] = value
    digests = {}
    for name, value in items.items():
        h = hashlib.sha256()
        describe(h, value)
        digests[name] = h.hexdigest()
    digests["study"] = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
    return digests


def describe(h: Any, obj: Any) -> None:
    """Feed a canonical description of `obj` into the hash `h`.

    Scalars by type and `repr` (exact for floats); arrays by dtype, shape and bytes;
    mappings sorted by key; sequences in order; dataclasses (equinox modules included)
    field by field; functions by module, qualified name and code (bytecode, constants and
    names; not the values they close over); anything else by type and `repr` without
    memory addresses.
    """
    tag = type(obj).__qualname__.encode()
    if obj is None or isinstance(obj, bool | int | float | complex | str | bytes):
        h.update(repr(obj).encode())
    elif isinstance(obj, np.ndarray | np.generic | jax.Array):
        array = np.ascontiguousarray(obj)
        h.update(f"array {array.dtype.str} {array.shape}:".encode() + array.tobytes())
    elif isinstance(obj, Mapping):
        h.update(tag + b"{")
        for key in sorted(obj, key=repr):
            describe(h, key)
            describe(h, obj[key])
        h.update(b"}")
    elif isinstance(obj, list | tuple):
        h.update(tag + b"(")
        for item in obj:
            describe(h, item)
        h.update(b")")
    elif isinstance(obj, enum.Enum | type):
        h.update(f"{obj!r}".encode())
    elif dataclasses.is_dataclass(obj):
        h.update(tag + b"<")
        for field in dataclasses.fields(obj):
            describe(h, (field.name, getattr(obj, field.name, None)))
        h.update(b">")
    elif isinstance(obj, functools.partial):
        describe(h, ("partial", obj.func, obj.args, obj.keywords))
    elif isinstance(obj, types.MethodType):
        describe(h, ("method", obj.__func__, obj.__self__))
    elif isinstance(obj, types.CodeType):
        describe(h, (obj.co_code, obj.co_consts, obj.co_names))
    elif callable(obj) and hasattr(inspect.unwrap(obj), "__code__"):
        function = inspect.unwrap(obj)
        describe(h, (function.__module__, function.__qualname__, function.__code__))
    else:
        h.update(tag + _ADDRESS.sub("", repr(obj)).encode())


def check_directory(directory: str | os.PathLike) -> Path:
    """The checkpoint directory as a Path; refuses a path that is not a directory."""
    if not isinstance(directory, str | os.PathLike):
        raise ValueError(f"checkpoint_dir must be a path, got {type(directory).__name__}")
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"checkpoint_dir {str(path)!r} exists and is not a directory")
    return path


def check_writable(path: Path, argument: str) -> None:
    """Make sure that the file `path` can be written, by writing: open it for appending
    (which creates it where it is missing and leaves an existing file's contents as they
    are; a file created here is removed again) and create and remove a temporary file
    beside it ([`check_writable_directory`][], what [`atomic_write`][] needs). Asking
    `os.access` is not enough: it says yes for root in read-only places such as `/proc`.

    **Arguments:**

    - `path`: the file to be written.
    - `argument`: the argument that named it (`save`, `--out`, …), for the message.

    **Raises:** `ValueError` naming `argument`, the path and the operating system's reason.
    """
    if path.is_dir():
        raise ValueError(f"cannot write {argument} {str(path)!r}: it is a directory")
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as err:
        raise ValueError(f"cannot write {argument} {str(path)!r}: {os_reason(err)}") from err
    if not existed:  # (another process checking the same path may have removed it first)
        path.unlink(missing_ok=True)
    check_writable_directory(path.parent, f"{argument} {str(path)!r}: its directory")


def check_writable_directory(directory: Path, argument: str) -> None:
    """Make sure that files can be created in `directory`, by creating and removing one.

    **Raises:** `ValueError` naming `argument`, the directory and the operating system's
    reason.
    """
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".jaxmbs-probe-", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(f"cannot write {argument} {str(directory)!r}: {os_reason(err)}") from err


def os_reason(err: OSError) -> str:
    """The operating system's reason for `err` (`strerror`, e.g. "Permission denied"), or
    its message where it has none."""
    return err.strerror or str(err)


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write `path` through `write(binary file)` to a temporary file beside it, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def file_sha256(path: Path) -> str:
    """The SHA-256 hex digest of the bytes of the file `path`."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


#: What `np.load` and reading an array raise on a file that is not a sound NPZ file.
_NPZ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)


class _Damaged(Exception):
    """A chunk file that cannot be trusted; the message says why (module notes)."""


class ChunkStore:
    """The chunk files of one study in one directory (see the module notes).

    Open it with [`ChunkStore.open`][], which creates the directory and the manifest or
    checks that an existing manifest describes the same study.
    """

    def __init__(
        self,
        directory: Path,
        digests: Mapping[str, str],
        on_damaged: Literal["recompute", "raise"] = "recompute",
    ):
        self.directory = directory
        self.study = digests["study"]
        self.on_damaged = on_damaged

    @classmethod
    def open(
        cls,
        directory: Path,
        digests: Mapping[str, str],
        info: Mapping[str, Any],
        on_damaged: Literal["recompute", "raise"] = "recompute",
    ) -> ChunkStore:
        """Open `directory` for the study with these digests ([`fingerprint`][]).

        **Arguments:**

        - `directory`: the checkpoint directory (created where missing).
        - `digests`: the study's fingerprint.
        - `info`: sample count, chunk size, …, written to a new manifest for the reader.
        - `on_damaged`: what to do with a damaged chunk file, one of `ON_DAMAGED`.

        **Returns:** the store.

        **Raises:** `ValueError` when the directory cannot be written, or holds a manifest
        that cannot be read or that describes another study (naming the items that differ).
        """
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(
                f"checkpoint_dir {str(directory)!r} cannot be created: {os_reason(err)}"
            ) from err
        manifest = directory / MANIFEST
        check_writable_directory(directory, "checkpoint_dir")
        if manifest.exists():
            theirs = _read_manifest(manifest)
            names = (set(theirs) | set(digests)) - {"study"}
            differ = sorted(k for k in names if theirs.get(k) != digests.get(k))
            if differ or theirs.get("study") != digests["study"]:
                raise ValueError(
                    f"checkpoint_dir {str(directory)!r} holds chunks of a different study: "
                    f"its {', '.join(differ) or 'fingerprint'} differ from this call's. Use "
                    "another directory, or remove this one to start over"
                )
        else:
            text = json.dumps({"format": FORMAT, "fingerprint": dict(digests), **info}, indent=1)
            atomic_write(manifest, lambda f: f.write(text.encode()))
        return cls(directory, digests, on_damaged)

    def path(self, start: int, stop: int) -> Path:
        """The file of samples `start … stop − 1`."""
        return self.directory / f"chunk-{start:09d}-{stop - 1:09d}.npz"

    def checksum_path(self, start: int, stop: int) -> Path:
        """The checksum record of the file of samples `start … stop − 1`."""
        return self.path(start, stop).with_suffix(".sha256")

    def finished(self, start: int, stop: int) -> bool:
        """Whether the chunk of samples `start … stop − 1` has a sound file (checked against
        its checksum record, its study and its sample range).

        **Returns:** False where the file is missing, or damaged with `on_damaged =
        "recompute"` (with a warning naming the file and why).

        **Raises:** `ValueError` naming the file and why when it is damaged and
        `on_damaged = "raise"`.
        """
        if not self.path(start, stop).exists():
            return False
        try:
            with self._open(start, stop):
                return True
        except _Damaged as err:
            self._damaged(start, stop, str(err))
            return False

    def write(self, start: int, stop: int, arrays: Mapping[str, np.ndarray]) -> None:
        """Write the chunk's arrays (leading axis stop − start) with the study and range,
        then its checksum record.

        **Raises:** `OSError` when a file cannot be written.
        """
        path = self.path(start, stop)
        meta = {"study": np.array(self.study), "start": np.array(start), "stop": np.array(stop)}
        atomic_write(path, lambda f: np.savez(f, **arrays, **meta))
        record = {
            "format": FORMAT,
            "study": self.study,
            "file": path.name,
            "sha256": file_sha256(path),
            "bytes": path.stat().st_size,
        }
        text = json.dumps(record, indent=1).encode()
        atomic_write(self.checksum_path(start, stop), lambda f: f.write(text))

    def read(self, start: int, stop: int, names: list[str]) -> dict[str, np.ndarray] | None:
        """The arrays `names` of the chunk of samples `start … stop − 1` (written by an
        earlier run or by another process), checked as in [`ChunkStore.finished`][].

        **Returns:** the arrays, or None where the file is missing or damaged and
        `on_damaged = "recompute"` (with a warning naming the file and why).

        **Raises:** `ValueError` naming the file and why when it is missing or damaged and
        `on_damaged = "raise"`.
        """
        if not self.path(start, stop).exists():
            why = (
                "is missing: the process that computed its samples did not write it (it "
                "failed to, or stopped)"
            )
            self._damaged(start, stop, why)
            return None
        try:
            with self._open(start, stop) as f:
                missing = sorted(set(names) - set(f.files))
                if missing:
                    raise _Damaged(f"lacks the arrays {missing} that this study computes")
                return {name: f[name] for name in names}
        except _Damaged as err:
            self._damaged(start, stop, str(err))
            return None

    def _open(self, start: int, stop: int) -> Any:
        """The chunk's NPZ file, opened after checking the file's bytes against its checksum
        record and, inside it, the study and the sample range.

        **Raises:** `_Damaged`, saying why.
        """
        path, record_path = self.path(start, stop), self.checksum_path(start, stop)
        try:
            record = json.loads(record_path.read_text())
        except FileNotFoundError:
            raise _Damaged(
                f"has no checksum record {record_path.name} (its writer stopped before writing "
                "it, or the file was put here from elsewhere)"
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise _Damaged(
                f"its checksum record {record_path.name} cannot be read: {err}"
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
            raise _Damaged(f"its checksum record {record_path.name} holds no sha256 field")
        if record.get("study") != self.study or record.get("file") != path.name:
            raise _Damaged(f"its checksum record {record_path.name} is of another study or file")
        try:
            digest = file_sha256(path)
        except OSError as err:
            raise _Damaged(f"cannot be read: {os_reason(err)}") from None
        if digest != record["sha256"]:
            raise _Damaged(
                "holds other bytes than were written (its SHA-256 differs from the one in "
                f"{record_path.name}): the file was changed, truncated or damaged"
            )
        f = None
        try:
            f = np.load(path, allow_pickle=False)
            study, span = str(f["study"]), (int(f["start"]), int(f["stop"]))
        except _NPZ_ERRORS as err:
            if f is not None:
                f.close()
            raise _Damaged(f"cannot be read as an NPZ file: {type(err).__name__}: {err}") from None
        if study != self.study or span != (start, stop):
            f.close()
            raise _Damaged("was written by another study or for other samples")
        return f

    def _damaged(self, start: int, stop: int, why: str) -> None:
        """Warn that the chunk's file is damaged or missing (`why`) and that its samples
        will be computed again, or raise a `ValueError` saying so (`on_damaged`)."""
        path = self.path(start, stop)
        if self.on_damaged == "raise":
            raise ValueError(
                f"checkpoint file {path} {why}. Pass on_damaged_chunk='recompute' to compute "
                f"its samples {start} … {stop - 1} again"
            )
        warnings.warn(
            f"checkpoint file {path} {why}; computing its samples {start} … {stop - 1} again",
            RuntimeWarning,
            stacklevel=4,
        )


def _read_manifest(manifest: Path) -> dict[str, Any]:
    """The fingerprint in a checkpoint directory's manifest.

    **Raises:** `ValueError` naming the manifest and what is wrong with it.
    """
    remedy = "Use another checkpoint_dir, or remove this one to start over"
    try:
        found = json.loads(manifest.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"checkpoint manifest {manifest} cannot be read: {err}. {remedy}") from err
    if not isinstance(found, dict):
        raise ValueError(
            f"checkpoint manifest {manifest} holds a JSON {type(found).__name__}, not an "
            f"object. {remedy}"
        )
    if found.get("format") != FORMAT:
        raise ValueError(
            f"checkpoint manifest {manifest} is of format {found.get('format')!r}, not "
            f"{FORMAT!r}. {remedy}"
        )
    theirs = found.get("fingerprint")
    if not isinstance(theirs, dict) or not all(isinstance(v, str) for v in theirs.values()):
        raise ValueError(
            f"checkpoint manifest {manifest} has no valid fingerprint (an object of digests). "
            f"{remedy}"
        )
    return theirs
