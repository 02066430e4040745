"""The SimPy simulator (backend ``sim``): the machine as resources, the algorithm as worker processes.

- :mod:`.cpu` cores and the OS scheduler, :mod:`.memory` bandwidth and NUMA,
  :mod:`.costs` what each step costs (:mod:`.profile_tables` what it reads from a
  calibrated profile, :mod:`.draws` how it draws durations), :mod:`.primitives` locks, CAS, barriers,
  backoff, :mod:`.numerics` the real math in simulated order,
  :mod:`.engine` the run (versions, records, stop), :mod:`.algorithms` one
  module per family, :mod:`.backend` the backend interface; :mod:`.executor` the executor traits
  modelled (``[sim] traits``), :mod:`.model_record` the model that ran (``metadata["model"]``).
"""
