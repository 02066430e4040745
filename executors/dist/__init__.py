"""Backend ``dist``: the distributed algorithms over a real transport, one torch.distributed process per node.

See :mod:`executors.dist.backend` (the backend), :mod:`.world` (processes, messages, clock),
:mod:`.collective` (sync), :mod:`.server` (param_server), :mod:`.elastic` (easgd, eawild),
:mod:`.collect` (rank 0's results) and :mod:`.launch` (``torchrun ... -m executors.dist.launch``).
"""
