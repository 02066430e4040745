"""Backend ``torch``: one process per worker over shared memory, in the style of PyTorch's Hogwild example.

``backend.py`` (run_once), ``state.py`` (the shared arrays), ``worker.py`` (the loops),
``calibrate.py`` (gradient times of a ``model = "torch"`` workload for the profile).
"""
