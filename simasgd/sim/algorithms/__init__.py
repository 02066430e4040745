"""One module per algorithm family; each ``start_*`` spawns the worker processes of one run."""

from __future__ import annotations

from collections.abc import Callable

from simasgd.sim.algorithms.bounded import start_backup, start_ssp
from simasgd.sim.algorithms.decentral import start_keuper, start_simuparallel
from simasgd.sim.algorithms.elastic import start_easgd, start_eawild
from simasgd.sim.algorithms.lockfree import start_hogwild, start_leashed
from simasgd.sim.algorithms.locks import start_mutex, start_rwlock
from simasgd.sim.algorithms.lopez import start_lopez
from simasgd.sim.algorithms.param_server import start_param_server
from simasgd.sim.algorithms.sequential import start_sequential
from simasgd.sim.algorithms.synchronous import start_k_async, start_k_sync, start_sync
from simasgd.sim.engine import SimRun

# Algorithm (a registry name) -> the function that starts its workers: the simulator's one list (its ALGORITHMS
# are the keys; every backend has such a table, executors/implementations.py).
IMPLEMENTATIONS: dict[str, Callable[[SimRun], None]] = {
    "sequential": start_sequential,
    "sync": start_sync,
    "k_sync": start_k_sync,
    "k_async": start_k_async,
    "mutex": start_mutex,
    "rwlock": start_rwlock,
    "hogwild": start_hogwild,
    "leashed": start_leashed,
    "lopez": start_lopez,
    "ssp": start_ssp,
    "backup": start_backup,
    "keuper": start_keuper,
    "simuparallel": start_simuparallel,
    "easgd": start_easgd,
    "eawild": start_eawild,
    "param_server": start_param_server,
}
