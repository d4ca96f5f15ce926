"""Models as protobuf: reading and writing (``models``), checking (``check``), walks and
byte-level facts (``protos``), weights held out (``weights``), linear shape inference
(``inference``), map types beside onnx_ir (``map_types``) and where sequences live
(``inventory``)."""
