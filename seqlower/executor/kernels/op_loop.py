from __future__ import annotations

import numpy as np

from seqlower.executor.kernels._base import SeqKernel
from seqlower.executor.kernels._subgraph import empty_like_declared, run_body


class Loop(SeqKernel):
    """Spec-exact Loop: an omitted ``M`` or ``cond`` means no limit / true; zero
    iterations give the initial carried values and empty scan outputs; scan outputs are
    stacked on a new leading axis (never ``vstack``-ed)."""

    def need_context(self) -> bool:
        return True

    def _run(self, M=None, cond=None, *v_initial, context=None, body=None, attributes=None, bindings=None):
        body = self.body
        in_names, out_names = body.input_names, body.output_names
        n_carried = len(in_names) - 2
        n_scan = len(out_names) - 1 - n_carried
        if n_carried < 0 or n_scan < 0:
            self.fail(f"body has {len(in_names)} inputs and {len(out_names)} outputs; needs 2+N inputs and 1+N+K outputs")
        if len(v_initial) != n_carried:
            self.fail(f"{len(v_initial)} initial values for a body carrying {n_carried}")
        if len(self.onnx_node.output) > n_carried + n_scan:
            self.fail(f"{len(self.onnx_node.output)} outputs for a body producing {n_carried + n_scan}")
        trip = None if M is None else self._scalar(M, "M", (np.int64,))
        keep = True if cond is None else bool(self._scalar(cond, "cond", (np.bool_,)))
        carried = list(v_initial)
        scans: list[list[np.ndarray]] = [[] for _ in range(n_scan)]
        i = 0
        while keep and (trip is None or i < trip):
            feeds = {in_names[0]: np.array(i, dtype=np.int64), in_names[1]: np.array(keep)}
            feeds.update(zip(in_names[2:], carried))
            outs = run_body(body, context or {}, feeds, attributes)
            keep = bool(self._scalar(outs[0], "body condition output", (np.bool_,)))
            carried = list(outs[1 : 1 + n_carried])
            for k, value in enumerate(outs[1 + n_carried :]):
                if not isinstance(value, np.ndarray):
                    self.fail(f"scan output {k} must be a tensor")
                if scans[k] and value.shape != scans[k][0].shape:
                    self.fail(
                        f"scan output {k} has shape {list(value.shape)} in iteration {i}"
                        f" but {list(scans[k][0].shape)} before"
                    )
                scans[k].append(value)
            i += 1
        stacked = [
            np.stack(s) if s else empty_like_declared(body.output_types[1 + n_carried + k])
            for k, s in enumerate(scans)
        ]
        return tuple(carried + stacked)

    def _scalar(self, value, what, dtypes):
        arr = self.check_tensor(value, what)
        if arr.size != 1:
            self.fail(f"{what} must have exactly one element, got shape {list(arr.shape)}")
        if arr.dtype.type not in dtypes:
            self.fail(f"{what} must be {'bool' if np.bool_ in dtypes else 'int64'}, got {arr.dtype}")
        return arr.reshape(()).item()
