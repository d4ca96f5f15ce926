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

EXPECTED = {
    13: """
[s_split] s_0, s_1, s_2 = Split <axis: int = 1> (x, s_split_sizes)
[s_0_squeezed_squeeze] s_0_squeezed = Squeeze (s_0, s_0_squeezed_axes)
[s_1_squeezed_squeeze] s_1_squeezed = Squeeze (s_1, s_0_squeezed_axes)
[s_2_squeezed_squeeze] s_2_squeezed = Squeeze (s_2, s_0_squeezed_axes)
[y_in0_unsqueezed_unsqueeze] y_in0_unsqueezed = Unsqueeze (s_0_squeezed, y_in0_unsqueezed_axes)
[y_in1_unsqueezed_unsqueeze] y_in1_unsqueezed = Unsqueeze (s_1_squeezed, y_in0_unsqueezed_axes)
[y_in2_unsqueezed_unsqueeze] y_in2_unsqueezed = Unsqueeze (s_2_squeezed, y_in0_unsqueezed_axes)
[y_concat] y = Concat <axis: int = 0> (y_in0_unsqueezed, y_in1_unsqueezed, y_in2_unsqueezed)
[t_split] t_0, t_1, t_2 = Split <axis: int = 1> (x, s_split_sizes)
[z_identity] z = Identity (t_2)
[n_identity] n = Identity (n_1)
""",
    11: """
[s_split] s_0, s_1, s_2 = Split <axis: int = 1, split: ints = [1, 1, 1]> (x)
[s_0_squeezed_squeeze] s_0_squeezed = Squeeze <axes: ints = [1]> (s_0)
[s_1_squeezed_squeeze] s_1_squeezed = Squeeze <axes: ints = [1]> (s_1)
[s_2_squeezed_squeeze] s_2_squeezed = Squeeze <axes: ints = [1]> (s_2)
[y_in0_unsqueezed_unsqueeze] y_in0_unsqueezed = Unsqueeze <axes: ints = [0]> (s_0_squeezed)
[y_in1_unsqueezed_unsqueeze] y_in1_unsqueezed = Unsqueeze <axes: ints = [0]> (s_1_squeezed)
[y_in2_unsqueezed_unsqueeze] y_in2_unsqueezed = Unsqueeze <axes: ints = [0]> (s_2_squeezed)
[y_concat] y = Concat <axis: int = 0> (y_in0_unsqueezed, y_in1_unsqueezed, y_in2_unsqueezed)
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
        assert inits["s_split_sizes"] == [1, 1, 1] and inits["s_0_squeezed_axes"] == [1]
