from __future__ import annotations

from seqlower.executor.kernels._base import SeqKernel
from seqlower.executor.kernels._subgraph import declared_elem_type, run_body
from seqlower.executor.values import elem_type_of


class SequenceMap(SeqKernel):
    """The body runs once per element of the first input; other sequence inputs are
    indexed by the iteration (truncated when longer, an error when shorter), tensors are
    passed whole, and the body sees the enclosing scope."""

    def need_context(self) -> bool:
        return True

    def _run(self, input_sequence, *additional_inputs, context=None, body=None, attributes=None):
        first = self.check_sequence(input_sequence, "input_sequence")
        body = self.body
        inputs = [first, *additional_inputs]
        if len(body.input_names) != len(inputs):
            self.fail(f"body takes {len(body.input_names)} inputs but the node has {len(inputs)}")
        n = len(first)
        for j, extra in enumerate(additional_inputs, start=1):
            if isinstance(extra, list) and len(extra) < n:
                self.fail(f"sequence input {j} has length {len(extra)}, shorter than input_sequence ({n})")
        results = [[] for _ in body.output_names]
        for i in range(n):
            feeds = {
                name: (value[i] if isinstance(value, list) else value)
                for name, value in zip(body.input_names, inputs)
            }
            for k, value in enumerate(run_body(body, context or {}, feeds, attributes)):
                results[k].append(self.check_tensor(value, f"body output {k}"))
        return tuple(
            self.new_seq(r, elem_type_of(r[0]) if r else declared_elem_type(body.output_types[k]))
            for k, r in enumerate(results)
        )
