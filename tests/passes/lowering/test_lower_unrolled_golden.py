"""Before/Expected, as ONNX text (TVM's legalization tests, for ONNX): the nodes the
Unrolled lowering emits, exactly, at an attribute-style and an input-style opset."""

from __future__ import annotations

import onnx
import onnx.parser
import pytest

from seqlower import lower

BEFORE = """
<ir_version: 7, opset_import: ["" : {opset}]>
g (float[2,3] x) => (float[3,2] y, float[2,1] z, int64 n) <int64 k = {{1}}, int64 last = {{-1}}> {{
  s = SplitToSequence <axis = 1, keepdims = 0> (x)
  y = ConcatFromSequence <axis = 0, new_axis = 1> (s)
  t = SplitToSequence <axis = 1> (x, k)
  z = SequenceAt (t, last)
  n = SequenceLength (t)
}}
"""

# The unbind stacked along another axis is the input moved (one Transpose: the rows of
# x along axis 1 stacked on a new axis 0), not a Split, Squeezes, Unsqueezes and a Concat.
EXPECTED = {
    13: """
[y_moved_transpose] y = Transpose <perm: ints = [1, 0]> (x)
[t_split] t_0, t_1, t_2 = Split <axis: int = 1> (x, s_split_sizes)
[z_identity] z = Identity (t_2)
[n_identity] n = Identity (n_1)
""",
    11: """
[y_moved_transpose] y = Transpose <perm: ints = [1, 0]> (x)
[t_split] t_0, t_1, t_2 = Split <axis: int = 1, split: ints = [1, 1, 1]> (x)
[z_identity] z = Identity (t_2)
[n_identity] n = Identity (n_1)
""",
}


def _nodes(m: onnx.ModelProto) -> list[str]:
    return [ln.strip() for ln in onnx.printer.to_text(m.graph).splitlines() if ln.strip().startswith("[")]


@pytest.mark.parametrize("opset", sorted(EXPECTED))
def test_split_unbind_stack_at_length_golden(opset):
    before = onnx.parser.parse_model(BEFORE.format(opset=opset))
    after = lower(before, optimize=False)  # the Unrolled rules alone, not the clean-up after them
    assert _nodes(after) == EXPECTED[opset].strip().splitlines()
    inits = {i.name: onnx.numpy_helper.to_array(i).tolist() for i in after.graph.initializer}
    assert inits["n_1"] == 3
    if opset == 13:
        assert inits["s_split_sizes"] == [1, 1, 1]
