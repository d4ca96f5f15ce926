"""What ``SplitToSequence`` makes, as far as static facts tell: chunk sizes, whether
``keepdims=0`` drops the axis (the keepdims policy), and whether a concatenation
undoes a split. Shared by the analysis, its choice of representation and the passes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from seqlower.errors import ModelError
from seqlower.ir.helpers import int_attr, const_array, is_default_domain, node_label

__all__ = ["STATIC_LENGTH_LIMIT", "dynamic_split_squeezes", "split_sizes", "split_squeezes", "unchanged_split_source"]


# A static length past this is treated as known only at run time: the analysis lists
# one entry per element, and a declared dim of 2**62 must not make it allocate that.
STATIC_LENGTH_LIMIT = 1 << 20


def split_sizes(node: ir.Node, dim: int | None, split: np.ndarray | None, has_split: bool) -> list[int] | None:
    """Chunk sizes of SplitToSequence when they are known at compile time (and number
    at most ``STATIC_LENGTH_LIMIT``)."""
    if has_split and split is None:
        return None
    if split is not None:
        if split.dtype not in (np.int32, np.int64):
            raise ModelError(f"{node_label(node)}: split must be int32 or int64, got {split.dtype}")
        if split.ndim == 0:
            k = int(split)
            if k <= 0:
                raise ModelError(f"{node_label(node)}: scalar split must be positive, got {k}")
            if dim is None or dim // k > STATIC_LENGTH_LIMIT:
                return None
            return [k] * (dim // k) + ([dim % k] if dim % k else [])
        if split.ndim != 1:
            raise ModelError(f"{node_label(node)}: split must be a scalar or 1-D, got shape {list(split.shape)}")
        sizes = [int(s) for s in split]
        if any(s < 0 for s in sizes):
            raise ModelError(f"{node_label(node)}: split entries must be >= 0, got {sizes}")
        if dim is not None and sum(sizes) != dim:
            raise ModelError(f"{node_label(node)}: split {sizes} sums to {sum(sizes)} but the dimension is {dim}")
        return sizes
    return None if dim is None or dim > STATIC_LENGTH_LIMIT else [1] * dim

def split_squeezes(node: ir.Node, sizes: Sequence[int], x_shape: ir.Shape | None, axis: int, policy: str) -> bool | None:
    """Whether SplitToSequence's chunks lose the split axis (None: only known at run time).

    The spec: only without ``split`` and with keepdims=0. onnxruntime also reshapes the
    chunks of a scalar split when keepdims=0, which works when every chunk has size 1
    along the axis or the chunk has no elements; the executor's keepdims policy
    (``seqlower.executor.kernels``) decides, and this mirrors it exactly.
    """
    keepdims = int_attr(node, "keepdims", 1)
    split = node.inputs[1] if len(node.inputs) > 1 else None
    if split is None:
        return not keepdims
    if keepdims:
        return False
    arr = const_array(split)
    if arr is None or arr.ndim != 0 or policy == "spec":
        return False if (arr is not None and arr.ndim != 0) or policy == "spec" else None
    all_ones = all(s == 1 for s in sizes)
    rest_zero: bool | None = None
    if x_shape is not None:
        rest = [d for i, d in enumerate(x_shape.dims) if i != axis]
        if any(d == 0 for d in rest):
            rest_zero = True
        elif all(isinstance(d, int) for d in rest):
            rest_zero = False
    ort_works = True if all_ones or rest_zero else (False if rest_zero is False else None)
    if ort_works is None:
        return None
    if policy == "auto":
        return ort_works
    if not ort_works:  # policy "onnxruntime"
        raise ModelError(
            f"{node_label(node)}: scalar split with keepdims=0 gives chunks of sizes {list(sizes)}, which fails"
            " on onnxruntime (keepdims policy 'onnxruntime'); use --keepdims-policy spec"
        )
    return True

def dynamic_split_squeezes(node: ir.Node, policy: str) -> bool | None:
    """Whether SplitToSequence's chunks lose the split axis, decided without knowing the
    chunk sizes (None: only known at run time; see :func:`split_squeezes`)."""
    keepdims = int_attr(node, "keepdims", 1)
    split = node.inputs[1] if len(node.inputs) > 1 else None
    if split is None:
        return not keepdims
    if keepdims or policy == "spec":
        return False
    arr = const_array(split)
    if arr is None:
        # A 1-D split ignores keepdims; a run-time scalar one depends on the policy.
        return False if split.shape is not None and split.shape.rank() == 1 else None
    if arr.ndim != 0:
        return False
    # Chunks of 1 are what onnxruntime squeezes (torch.unbind); other chunks only where
    # each has size 1 along the axis or no elements, which the input's shape may tell.
    if int(arr) == 1:
        return True
    shape = node.inputs[0].shape
    if shape is None or shape.rank() == 0:
        return None
    axis = int_attr(node, "axis", 0) % shape.rank()
    dim = shape.dims[axis]
    sizes = split_sizes(node, dim if isinstance(dim, int) else None, arr, True)
    if sizes is not None:
        return split_squeezes(node, sizes, shape, axis, policy)
    return True if any(d == 0 for i, d in enumerate(shape.dims) if i != axis) else None

def unchanged_split_source(node: ir.Node, policy: str) -> ir.Value | None:
    """The input of the SplitToSequence this concat undoes (same axis, nothing changed
    in between but Identity), or None."""
    v = node.inputs[0]
    p = v.producer() if v is not None else None
    while p is not None and p.op_type == "Identity" and is_default_domain(p):
        p = p.inputs[0].producer() if p.inputs[0] is not None else None
    if p is None or p.op_type != "SplitToSequence" or not is_default_domain(p):
        return None
    x = p.inputs[0]
    if x is None or x.shape is None:
        return None
    r = x.shape.rank()
    split_axis = int_attr(p, "axis", 0) % r
    squeeze = dynamic_split_squeezes(p, policy)
    if squeeze is None:
        return None
    new_axis = bool(int_attr(node, "new_axis", 0))
    if new_axis != squeeze:
        return None
    axis = int_attr(node, "axis", 0)
    return x if axis % r == split_axis else None
