"""Numeric command-line options that must be real, bounded numbers, and where errors are printed.

Why: click's ``FloatRange`` lets ``nan`` through (every comparison with NaN is false) and an open
upper bound lets ``inf`` through, so ``--inflation inf`` ran until memory ran out and ``--inflation
nan`` wrote bare ``NaN`` into a JSON file. ``bounded(lo, hi)`` is the one check every float option
uses: finite, and within ``[lo, hi]`` (``lo_open`` for a strictly positive option), refused with the
option's name and the range before any work starts. ``errors`` is the console for messages that are
not results: standard error, so a script reading standard output never parses an error as data.
``refuse`` is the one way a command stops on input it cannot use: the reason on standard error, a
non-zero exit status, no traceback.

Exit statuses, the same for every command: 2 for input refused (a usage error, a bad file), 3 for a
service or file out of reach, 1 for work that failed (an unexpected error too: main.py's handler
prints it as one line, the traceback only with ``--debug``).

Outputs: ``out_folder`` / ``out_file`` are the ``--out`` callbacks that refuse a path that can never
be written (under a file, an existing file where a folder goes) before any work starts; ``atomic_folder``
and ``atomic_file`` write into a temporary sibling and rename it into place only when every write
succeeded, so a failed or interrupted run leaves no empty or half-written output. ``strict_json``
writes what ``json`` would, except that a non-finite number becomes ``null`` with its reason in
``null_reasons`` (``NaN`` is not JSON). ``int_list`` parses a comma-separated list of whole numbers
within stated bounds and a stated count, so no value of an option can size an allocation.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

__all__ = ["atomic_file", "atomic_folder", "bounded", "errors", "int_list", "nats_connection", "out_file",
           "out_folder", "refuse", "strict_json"]

errors = Console(stderr=True)
"""where ``bad input`` and other refusals go (standard error)"""


def refuse(message: object, *, label: str = "bad input", code: int = 2) -> NoReturn:
    """Print ``label: message`` on standard error and exit with ``code`` (2: bad input, 3: a service
    or file out of reach, 1: the work failed). The message is printed as text, never as markup."""
    errors.print(f"[red]{escape(label)}:[/red] {escape(str(message))}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def bounded(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[typer.CallbackParam, float | None],
                                                                         float | None]:
    """A typer option callback: the value must be finite and within ``[lo, hi]`` (``(lo, hi]``)."""

    def check(param: typer.CallbackParam, value: float | None) -> float | None:
        if value is None:
            return value
        name = "/".join(param.opts) if param.opts else (param.name or "value")
        left = "(" if lo_open else "["
        if not math.isfinite(value) or value < lo or value > hi or (lo_open and value == lo):
            raise typer.BadParameter(f"{name} must be a finite number in {left}{lo:g}, {hi:g}], got {value!r}")
        return value

    check.bounds = (lo, hi, lo_open)  # type: ignore[attr-defined]  # read by the CLI fuzz test
    return check


def int_list(text: str, *, name: str, lo: int, hi: int, most: int, ranges: bool = False) -> list[int]:
    """``'1,6,24'`` (with ``ranges``, also ``'42-51'``) -> sorted unique whole numbers, each within
    ``[lo, hi]`` and at most ``most`` of them; anything else is a ``BadParameter`` naming ``name``.
    A range is checked against the bounds before it is expanded (``0-99999999999`` allocates nothing)."""
    values: set[int] = set()
    shape = "42-51 or 42,43" if ranges else "1,6,24"
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        try:
            if ranges and "-" in part[1:]:
                a_text, b_text = part[0] + part[1:].split("-", 1)[0], part[1:].split("-", 1)[1]
                a, b = int(a_text), int(b_text)
            else:
                a = b = int(part)
        except ValueError:
            raise typer.BadParameter(f"{name} must look like {shape}; got {text[:80]!r}") from None
        if not lo <= a <= b <= hi:
            raise typer.BadParameter(f"{name}: {part[:40]!r} is not within {lo}..{hi}" + (" (low-high)" if a > b else ""))
        if len(values) + (b - a + 1) > most:
            raise typer.BadParameter(f"{name}: more than {most} values in {text[:80]!r}")
        values.update(range(a, b + 1))
    if not values:
        raise typer.BadParameter(f"{name}: no values in {text[:80]!r}")
    return sorted(values)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")


def _writable_target(path: Path, *, folder: bool) -> str | None:
    """Why ``path`` can never be written as a folder (``folder``) or a file, or None when it can be."""
    text = str(path)
    if not text.strip() or "\x00" in text:
        return "an empty path or one with a NUL byte"
    if len(os.fsencode(text)) > 4000:
        return "a path longer than 4,000 bytes"
    if path.exists() or path.is_symlink():
        if folder and not path.is_dir():
            return "it exists and is not a folder"
        if not folder and path.is_dir():
            return "it is a folder"
    base = _nearest_existing(path.parent)
    if not base.is_dir():
        return f"{base} is not a folder"
    if not os.access(base, os.W_OK | os.X_OK):
        return f"folder {base} is not writable"
    return None


def _out_callback(folder: bool) -> Callable[[typer.CallbackParam, Path | None], Path | None]:
    def check(param: typer.CallbackParam, value: Path | None) -> Path | None:
        if value is None:
            return value
        why = _writable_target(value, folder=folder)
        if why:
            name = "/".join(param.opts) if param.opts else (param.name or "path")
            raise typer.BadParameter(f"{name} {str(value)[:200]!r} cannot be written: {why}")
        return value

    return check


out_folder = _out_callback(folder=True)
"""a typer option callback: the path can be written as an output folder (checked before any work)"""
out_file = _out_callback(folder=False)
"""a typer option callback: the path can be written as an output file (checked before any work)"""


def _made_parents(path: Path) -> list[Path]:
    """Make the missing folders above ``path``; the ones made, deepest first (to remove on failure)."""
    missing = [p for p in path.parents if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    return missing


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _unmake(parents: list[Path]) -> None:
    for p in parents:  # deepest first; a folder something else wrote into meanwhile stays
        try:
            p.rmdir()
        except OSError:
            break


@contextmanager
def atomic_folder(out: Path) -> Iterator[Path]:
    """``with atomic_folder(out) as tmp:`` write the outputs into ``tmp`` (a new folder beside ``out``);
    when the block succeeds they are renamed into place: ``tmp`` becomes ``out`` when there was none,
    else each output replaces its namesake in ``out`` (other files there are kept). When the block
    fails, ``tmp`` and any folder made above it are removed and the error goes on: no empty or
    half-written output folder is left. Folders that cannot be made are refused (exit 3)."""
    made: list[Path] = []
    try:
        made = _made_parents(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
        tmp.chmod(0o777 & ~_umask())  # a folder's usual mode, not mkdtemp's owner-only one
    except OSError as exc:
        _unmake(made)
        refuse(f"{out}: {exc.strerror or exc}", label="cannot write", code=3)
    try:
        yield tmp
        if not out.exists():
            tmp.rename(out)
            return
        for item in tmp.iterdir():
            target = out / item.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            item.replace(target)
        tmp.rmdir()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _unmake(made)
        raise


@contextmanager
def atomic_file(out: Path) -> Iterator[Path]:
    """``with atomic_file(out) as tmp:`` write ``tmp`` (beside ``out``); renamed over ``out`` only
    when the block succeeds, removed (with any folder made for it) when it fails."""
    made: list[Path] = []
    try:
        made = _made_parents(out)
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
        os.close(fd)
        os.chmod(name, 0o666 & ~_umask())  # a file's usual mode, not mkstemp's owner-only one
    except OSError as exc:
        _unmake(made)
        refuse(f"{out}: {exc.strerror or exc}", label="cannot write", code=3)
    tmp = Path(name)
    try:
        yield tmp
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        _unmake(made)
        raise


def _finite(value: Any, path: str, reasons: dict[str, str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        reasons[path] = f"not a finite number ({value!r})"
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{path}.{k}" if path else str(k), reasons) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, f"{path}[{i}]", reasons) for i, v in enumerate(value)]
    return value


def strict_json(obj: Any, *, indent: int | None = 2) -> str:
    """``json.dumps(obj)`` with every non-finite float written as ``null``; a dict gains
    ``null_reasons`` (dotted path -> why), merged into one it already has. Never emits ``NaN``."""
    reasons: dict[str, str] = {}
    clean = _finite(obj, "", reasons)
    if reasons and isinstance(clean, dict):
        clean["null_reasons"] = {**(clean.get("null_reasons") or {}), **reasons}
    return json.dumps(clean, indent=indent, allow_nan=False) + "\n"


def nats_connection(nats_url: str, tls_ca: str = "") -> tuple[dict[str, Any], str]:
    """How an operator command connects to NATS at ``nats_url``: (the client's options, the CA file used,
    "" for none). As NATS_USER / NATS_PASSWORD when set; a TLS server is verified with ``tls_ca`` (the
    command's ``--tls-ca``, whose default is NATS_TLS_CA), or, without one, when ``nats_url`` names a
    server of the embedded stack running in ``.gpuaware`` (`gpuaware up --tls`), with the CA its
    stack.json records; an operator on the stack's machine need not look it up. A CA file that cannot be
    used is bad input (exit 2), refused before any connection."""
    import ssl
    from urllib.parse import urlsplit

    from gpuaware import bus
    from gpuaware.devstack import stack_status

    def servers(url: str) -> set[str]:  # host:port, whatever the scheme (nats:// reaches a TLS server too)
        return {urlsplit(u if "://" in u else f"nats://{u}").netloc.rpartition("@")[2]
                for u in (part.strip() for part in url.split(",")) if u}

    options: dict[str, Any] = {}
    if os.environ.get("NATS_USER"):
        options = {"user": os.environ["NATS_USER"], "password": os.environ.get("NATS_PASSWORD", "")}
    if not tls_ca:
        state = stack_status()
        if state is not None and state.nats_tls_ca and servers(nats_url) & servers(state.nats_url):
            tls_ca = state.nats_tls_ca
    if tls_ca:
        try:
            options["tls"] = bus.tls_context(tls_ca)
        except (OSError, ssl.SSLError) as exc:
            refuse(f"{tls_ca}: {exc.strerror or exc}", label="--tls-ca: cannot use the CA certificate")
    return options, tls_ca
