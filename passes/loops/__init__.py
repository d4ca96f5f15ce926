"""Control flow for targets without it: Loops unrolled, bounded, vectorized or made
Scans, and Ifs run as selects."""
