"""onnx_ir for the modules a model with nothing to lower passes through (reading,
checking, writing, the region path): loaded when a name is first read from it, not when
they are imported. onnx_ir imports sympy at once, 0.55 s of a 1-node model's
``seqlower lower`` or ``check``.

    from seqlower._deferred import onnx_ir as ir   # instead of: import onnx_ir as ir

Not a stand-in put in ``sys.modules``: importing a submodule (``onnx_ir.passes.common``)
of a package that is a stand-in there imports that submodule twice (Python 3.11's
import system looks for the child before reading the parent's ``__path__``), and
importlib's LazyLoader loads its module on the next ``import`` of it.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

__all__ = ["onnx_ir"]


class _Deferred(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        real = importlib.import_module(self.__name__)
        # From now on its names are read here without this method; a submodule imported
        # later is still found (below).
        self.__dict__.update({k: v for k, v in real.__dict__.items() if not k.startswith("__")})
        return getattr(real, attr)


onnx_ir = _Deferred("onnx_ir")
