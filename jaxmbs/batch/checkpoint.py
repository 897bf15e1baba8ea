"""Resumable Monte Carlo output: one NPZ file per finished chunk, written atomically.

A checkpoint directory holds `manifest.json` and the files `chunk-SSSSSSSSS-EEEEEEEEE.npz`,
one per finished chunk, named by its first and last sample index. Every file is written to
a temporary name in the same directory, flushed to disk and renamed (`os.replace`, atomic
on POSIX file systems), so a run killed at any moment leaves only whole chunk files (and
at most a stray `.chunk-….tmp` per killed writer, which nothing reads).

The manifest holds a fingerprint of the study: SHA-256 digests of the mechanism (its static
description, functions by module, qualified name and code), the inputs (every array's
dtype, shape and bytes), the times, the options (simulate's keyword arguments, the response
function, what is kept) and the chunking, and the numerics (float width, JAX version, platform).
A call with the same arguments finds the manifest equal and reads the finished chunks
instead of computing them; a call with different ones is refused, naming the parts that
differ. Every chunk file repeats the fingerprint and its sample range, so a file from
another study is never read as this one's. Files are NPZ and JSON, never pickles.
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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import jax
import numpy as np

#: The format tag in the manifest.
FORMAT = "jaxmbs.monte_carlo.checkpoint/1"
MANIFEST = "manifest.json"

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def fingerprint(parts: Mapping[str, Any]) -> dict[str, str]:
    """SHA-256 hex digest of each part (see [`describe`][]) and of all of them (`"study"`)."""
    digests = {}
    for name, value in parts.items():
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


class ChunkStore:
    """The chunk files of one study in one directory (see the module notes).

    Open it with [`ChunkStore.open`][], which creates the directory and the manifest or
    checks that an existing manifest describes the same study.
    """

    def __init__(self, directory: Path, digests: Mapping[str, str]):
        self.directory = directory
        self.study = digests["study"]

    @classmethod
    def open(
        cls, directory: Path, digests: Mapping[str, str], info: Mapping[str, Any]
    ) -> ChunkStore:
        """Open `directory` for the study with these digests ([`fingerprint`][]).

        `info` (sample count, chunk size, …) is written to a new manifest for the reader.

        **Raises:** `ValueError` when the directory cannot be written or holds a manifest of
        another study.
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
            found = json.loads(manifest.read_text())
            if found.get("format") != FORMAT:
                raise ValueError(
                    f"checkpoint_dir {str(directory)!r} holds a manifest of format "
                    f"{found.get('format')!r}, not {FORMAT!r}"
                )
            theirs = found.get("fingerprint", {})
            differ = sorted(k for k in digests if k != "study" and theirs.get(k) != digests[k])
            if differ or theirs.get("study") != digests["study"]:
                raise ValueError(
                    f"checkpoint_dir {str(directory)!r} holds chunks of a different study: "
                    f"its {', '.join(differ) or 'fingerprint'} differ from this call's. Use "
                    "another directory, or remove this one to start over"
                )
        else:
            text = json.dumps({"format": FORMAT, "fingerprint": dict(digests), **info}, indent=1)
            atomic_write(manifest, lambda f: f.write(text.encode()))
        return cls(directory, digests)

    def path(self, start: int, stop: int) -> Path:
        """The file of samples `start … stop − 1`."""
        return self.directory / f"chunk-{start:09d}-{stop - 1:09d}.npz"

    def finished(self, start: int, stop: int) -> bool:
        """Whether the chunk of samples `start … stop − 1` has its file.

        **Raises:** `ValueError` when the file belongs to another study or sample range.
        """
        path = self.path(start, stop)
        if not path.exists():
            return False
        with np.load(path, allow_pickle=False) as f:
            self._check(f, path, start, stop)
        return True

    def write(self, start: int, stop: int, arrays: Mapping[str, np.ndarray]) -> None:
        """Write the chunk's arrays (leading axis stop − start) with the study and range."""
        meta = {"study": np.array(self.study), "start": np.array(start), "stop": np.array(stop)}
        atomic_write(self.path(start, stop), lambda f: np.savez(f, **arrays, **meta))

    def read(self, start: int, stop: int, names: list[str]) -> dict[str, np.ndarray]:
        """The arrays `names` of the chunk of samples `start … stop − 1`.

        **Raises:** `ValueError` when the file is missing, belongs to another study or
        sample range, or lacks one of the arrays.
        """
        path = self.path(start, stop)
        if not path.exists():
            raise ValueError(
                f"{path} is missing: the process that computed samples {start} … {stop - 1} "
                "did not finish them (run the study again to compute them)"
            )
        with np.load(path, allow_pickle=False) as f:
            self._check(f, path, start, stop)
            missing = sorted(set(names) - set(f.files))
            if missing:
                raise ValueError(f"{path} lacks the arrays {missing}")
            return {name: f[name] for name in names}

    def _check(self, f: Any, path: Path, start: int, stop: int) -> None:
        if str(f["study"]) != self.study or (int(f["start"]), int(f["stop"])) != (start, stop):
            raise ValueError(f"{path} was written by another study or for other samples")
