"""The lowerings: each sequence value to its representation (Unrolled, Stacked, Ragged,
Flat), optionals, ZipMap and ReverseSequence, with the signature conversion they share."""
