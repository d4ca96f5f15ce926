"""What every subcommand shares: exit codes, where text goes, tables, staged text files,
JSON conventions, progress. Imports nothing heavy."""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from seqlower.errors import SeqlowerError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

STDOUT = "-"


class Console:
    """Where human text goes: stdout, unless stdout carries a model or a JSON document
    (``-o -``, ``--report -``, ``--json``), then stderr; nothing with ``--quiet``."""

    def __init__(self, *, stdout_taken: bool = False, quiet: bool = False) -> None:
        self.stream: IO[str] | None = None if quiet else (sys.stderr if stdout_taken else sys.stdout)

    def __call__(self, text: str = "") -> None:
        if self.stream is not None:
            print(text, file=self.stream)


def print_table(rows: list[tuple[str, ...]], indent: str = "", out: Callable[[str], None] | None = None,
                right: Iterable[int] = ()) -> None:
    """Columns padded to their widest cell, each line to ``out`` (a Console, or a list's
    ``append``); ``right``: column indexes aligned right."""
    out = out or Console()
    right = set(right)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out(indent + "  ".join(cells).rstrip())


def nulls(doc: Any) -> Any:
    """JSON documents say null for an absent value, never "" (an unnamed node, no error)."""
    if isinstance(doc, dict):
        return {k: nulls(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [nulls(v) for v in doc]
    return None if doc == "" else doc


def stage_text(path: Path, text: str, what: str = "") -> str:
    """``text`` in a temporary file beside ``path``, to be committed (renamed) later.
    Created with the user's umask, as the file it becomes should be."""
    folder = path.parent if str(path.parent) else Path(".")
    for _ in range(100):
        tmp = folder / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        except OSError as e:
            raise SeqlowerError(f"{path}: cannot write{' ' + what if what else ''} ({e.strerror or e})") from None
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
        except OSError as e:
            unlink_quietly(tmp)
            raise SeqlowerError(f"{path}: cannot write{' ' + what if what else ''} ({e.strerror or e})") from None
        return str(tmp)
    raise SeqlowerError(f"{path}: cannot write{' ' + what if what else ''} (no free temporary name)")


def commit_text(path: Path, tmp: str, what: str = "") -> None:
    try:
        os.replace(tmp, path)
    except OSError as e:
        unlink_quietly(tmp)
        raise SeqlowerError(f"{path}: cannot write{' ' + what if what else ''} ({e.strerror or e})") from None


def write_text_atomically(path: Path, text: str) -> None:
    commit_text(path, stage_text(path, text))


def unlink_quietly(p: str | Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def find_models(paths: list[str], exclude: Path | None = None) -> list[tuple[Path, Path]]:
    """Every ``.onnx`` file named or below a named folder, as (path, path relative to the
    folder it was found under), sorted; files under ``exclude`` (an output folder inside
    the input folder) are left out."""
    found: list[tuple[Path, Path]] = []
    skip = exclude.resolve() if exclude is not None and exclude.exists() else None
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(p.rglob("*.onnx")):
                if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts) and (
                        skip is None or skip not in f.resolve().parents):
                    found.append((f, f.relative_to(p)))
        else:
            found.append((p, Path(p.name)))
    return found


class Progress:
    """``n/total`` on stderr, rewritten in place, when stderr is a terminal (never in a
    pipe or a CI log, which get the one-line-per-model output only)."""

    def __init__(self, total: int, what: str) -> None:
        self.total, self.what, self.done = total, what, 0
        self.live = sys.stderr.isatty() and total > 1
        self.start = time.perf_counter()

    def step(self, label: str = "") -> None:
        self.done += 1
        if self.live:
            left = self.total - self.done
            sys.stderr.write(f"\r\x1b[2K{self.what}: {self.done}/{self.total}, {left} left"
                             f"  {time.perf_counter() - self.start:.1f} s  {label[:50]}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.live:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


def worst(codes: Iterable[int]) -> int:
    return max(codes, default=EXIT_OK)
