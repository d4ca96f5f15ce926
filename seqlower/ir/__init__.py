"""The onnx_ir side: helpers on values, graphs and constants (``helpers``) and the one
place new nodes are made (``builder``). Imports nothing of the protobuf side."""
