"""onnxruntime in a child process, so that a native crash (SIGFPE on a zero split,
an abort in ReverseSequence) is an error report instead of a dead parent.

Protocol on the inherited pipes: length-prefixed pickles. Only seqlower's own parent
process talks to it.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
from collections.abc import Callable
from typing import Any, BinaryIO


def read_msg(stream: BinaryIO) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", head)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError
    return pickle.loads(body)


def write_msg(stream: BinaryIO, obj: Any) -> None:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(body)) + body)
    stream.flush()


_LIMITS: tuple[int, int] | None = None


def _limits(ort: Any) -> tuple[int, int]:
    """The newest IR version and default-domain opset this onnxruntime loads (probed)."""
    global _LIMITS
    if _LIMITS is None:
        import onnx
        from onnx import TensorProto, helper

        def loads(ir: int, opset: int) -> bool:
            g = helper.make_graph(
                [helper.make_node("Identity", ["x"], ["y"])], "probe",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
            )
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)
            try:
                ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
                return True
            except Exception:
                return False

        ir = next((v for v in range(onnx.IR_VERSION, 2, -1) if loads(v, 11)), 3)
        opset = next((v for v in range(onnx.defs.onnx_opset_version(), 6, -1) if loads(ir, v)), 7)
        _LIMITS = (ir, opset)
    return _LIMITS


def _signature(schema: Any) -> tuple:
    return (
        [(i.name, i.option) for i in schema.inputs],
        [(o.name, o.option) for o in schema.outputs],
        sorted((k, a.required, a.default_value.SerializeToString()) for k, a in schema.attributes.items()),
    )


def _ops(model: Any) -> set[str]:
    ops: set[str] = set()
    stack = [model.graph.node] + [f.node for f in model.functions]
    while stack:
        for node in stack.pop():
            if node.domain in ("", "ai.onnx"):
                ops.add(node.op_type)
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g.node)
                stack.extend(g.node for g in a.graphs)
    return ops


def downgrade(model: Any, ort: Any) -> list[str]:
    """Stamp the model with the IR version and opset onnxruntime loads, where no op's
    signature changed between the two opsets; raise ValueError naming the op otherwise."""
    import onnx

    max_ir, max_opset = _limits(ort)
    notes = []
    if model.ir_version > max_ir:
        notes.append(f"IR version {model.ir_version} run as {max_ir} (onnxruntime {ort.__version__} loads up to {max_ir})")
        model.ir_version = max_ir
    imports = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    for f in model.functions:
        imports += [o for o in f.opset_import if o.domain in ("", "ai.onnx")]
    version = max((o.version for o in imports), default=0)
    if version > max_opset:
        changed = []
        for op in sorted(_ops(model)):
            try:
                new = onnx.defs.get_schema(op, version, "")
                old = onnx.defs.get_schema(op, max_opset, "")
            except onnx.defs.SchemaError:
                continue
            if new.since_version != old.since_version:
                if _signature(new) != _signature(old):
                    raise ValueError(
                        f"onnxruntime {ort.__version__} loads opsets up to {max_opset}, and {op} changed its "
                        f"signature in opset {new.since_version}: the model cannot run on it unchanged"
                    )
                changed.append(f"{op}-{new.since_version} as {op}-{old.since_version}")
        for o in imports:
            o.version = min(o.version, max_opset)
        notes.append(
            f"opset {version} run as {max_opset} (onnxruntime {ort.__version__} loads up to {max_opset})"
            + (f"; same inputs, outputs and attributes: {', '.join(changed)}" if changed else "")
        )
    return notes


def _to_ort(value: Any) -> Any:
    if isinstance(value, list):
        return [_to_ort(v) for v in value]
    return value


def protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """The protocol's pipes; anything a library prints from now on goes to stderr."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return sys.stdin.buffer, out


def serve(
    inp: BinaryIO,
    out: BinaryIO,
    key_of: Callable[[dict], Any],
    load: Callable[[dict], tuple[Any, dict]],
    run: Callable[[Any, dict], list | tuple[list, list[str]]],
    error_lines: int = 1,
) -> None:
    """Answer load and run messages until the parent closes the pipe: ``load`` gives a
    runnable and the reply fields, cached by ``key_of``; ``run`` gives the outputs (and
    notes on how it ran them).
    An exception is reported to the parent, which raises ExecutionError."""
    loaded: dict[Any, tuple[Any, dict]] = {}
    while True:
        try:
            msg = read_msg(inp)
        except EOFError:
            return
        try:
            key = key_of(msg)
            if msg["op"] == "load":
                if key not in loaded:
                    loaded[key] = load(msg)
                write_msg(out, {"ok": True, **loaded[key][1]})
            elif key not in loaded:
                write_msg(out, {"ok": False, "missing": True, "error": "model not loaded"})
            else:
                ran = run(loaded[key][0], msg)
                outputs, notes = ran if isinstance(ran, tuple) else (ran, [])
                write_msg(out, {"ok": True, "outputs": outputs, "notes": notes})
        except Exception as e:  # noqa: BLE001 - every failure goes back to the parent
            text = str(e).split("Stack backtrace:")[0]  # tract appends its Rust stack
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            write_msg(out, {"ok": False, "error": f"{type(e).__name__}: {' '.join(lines[:error_lines])[:100 * error_lines + 100]}"})


def main() -> None:
    inp, out = protocol_streams()
    import onnx
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }

    def load(msg: dict) -> tuple[Any, dict]:
        model = onnx.ModelProto()
        model.ParseFromString(msg["model"])
        notes = downgrade(model, ort)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = levels[msg["opt_level"]]
        opts.log_severity_level = 3
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return sess, {"notes": notes, "version": ort.__version__}

    def run(sess: Any, msg: dict) -> list:
        return sess.run(None, {k: _to_ort(v) for k, v in msg["feeds"].items()})

    serve(inp, out, lambda msg: (msg["key"], msg["opt_level"]), load, run)


if __name__ == "__main__":
    main()
