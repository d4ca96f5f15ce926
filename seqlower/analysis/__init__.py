"""The sequence analysis: the lattice (``lattice``, ``plist``), the analyzer and its
transfer functions (``analyzer``, ``transfer_control``, ``splits``) and the choice of
representation (``choose``). Importing the package loads none of them."""
