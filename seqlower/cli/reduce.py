"""``seqlower reduce``: a model that fails or differs on a runtime, cut down to the
smallest model that still does (``seqlower.executor.reduce``)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from seqlower.cli._common import EXIT_FAIL, EXIT_OK, nulls
from seqlower.errors import ModelWarning, SeqlowerError

if TYPE_CHECKING:
    from seqlower.executor.reduce import Reduction


def cmd_reduce(args: argparse.Namespace) -> int:
    from seqlower.executor import Executor, load_inputs, parse_dims, synthesize_inputs
    from seqlower.executor.reduce import reduce_failure
    from seqlower.io.models import read_model_proto

    if args.output and Path(args.output).exists() and (not Path(args.output).is_dir() or any(Path(args.output).iterdir())):
        raise SeqlowerError(f"{args.output}: exists and is not an empty folder; reduce writes a new one")
    model = read_model_proto(args.model)
    ports = Executor(model, backend="reference").inputs
    feeds = load_inputs(args.inputs, ports) if args.inputs \
        else synthesize_inputs(ports, args.seed, parse_dims(args.dim), args.seq_len)
    with warnings.catch_warnings():
        # The cut models' values declare no shapes: that is how they are cut, not news.
        warnings.simplefilter("ignore", ModelWarning)
        found = reduce_failure(model, args.backend, feeds)
    if found.found and args.output:
        _write(Path(args.output), found)
    if args.json:
        from seqlower import __version__

        doc = {"seqlower_version": __version__, "input": args.model, "backend": args.backend, **found.to_json(),
               "output": args.output if found.found else None}
        print(json.dumps(nulls(doc), indent=2))
    else:
        print(f"{args.model}: {found.summary}")
        if found.found and args.output:
            print(f"wrote {Path(args.output) / 'reproducer.onnx'} and its inputs in {Path(args.output) / 'test_data_set_0'}")
    return EXIT_OK if found.found else EXIT_FAIL


def _write(folder: Path, found: Reduction) -> None:
    """The reproducer and its inputs and the reference's output (backend test-data layout),
    written in a folder beside ``folder`` and renamed into place: all or nothing."""
    import onnx

    from seqlower.executor import Executor, save_values

    parent = folder.parent if str(folder.parent) else Path(".")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=parent))
    except OSError as e:
        raise SeqlowerError(f"{folder}: cannot write the reproducer ({e.strerror or e})") from None
    try:
        onnx.save(found.reproducer, tmp / "reproducer.onnx")
        ex = Executor(found.reproducer, backend="reference")
        save_values(tmp / "test_data_set_0", "input", ex.inputs, [found.feeds[p.name] for p in ex.inputs])
        save_values(tmp / "test_data_set_0", "output", ex.outputs, [found.expected])
        if folder.is_dir():
            folder.rmdir()  # (empty: checked before anything ran)
        os.replace(tmp, folder)
    except OSError as e:
        raise SeqlowerError(f"{folder}: cannot write the reproducer ({e.strerror or e})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
