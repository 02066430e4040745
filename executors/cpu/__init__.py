"""The CPU executor (backend ``cpu``): numba nogil worker loops on real OS threads."""
