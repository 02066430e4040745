"""Backend ``dist``: the distributed algorithms over a real transport, one torch.distributed process per node.

See :mod:`executors.dist.backend` (the backend), :mod:`.world` (processes, messages, clock),
:mod:`.synchronous` (sync), :mod:`.param_server` (param_server, ssp), :mod:`.bounded` (backup),
:mod:`.elastic` (easgd, eawild), :mod:`.decentral` (keuper, simuparallel): one module per family, named as the
simulator's; :data:`.ranks.IMPLEMENTATIONS` maps each algorithm to its role,
:mod:`.collect` (rank 0's results) and :mod:`.launch` (``torchrun ... -m executors.dist.launch``).
"""
