"""Imported first by the package, before NumPy loads OpenBLAS.

After each matrix product OpenBLAS's idle threads spin for 2^28 cycles (about 0.1 s), taking a
core from the threaded Adam update that follows the backward pass (seed model: Adam 105 -> 70 ms)
and from whatever else runs next. 2^24 cycles (a few milliseconds) still bridge the gaps between
one step's products. The setting only takes effect when NumPy is not imported yet, and a value
already in the environment wins.
"""

import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "24")
