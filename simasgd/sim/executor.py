"""The executor the simulator models: the traits of the backend ``[sim] traits`` names (simasgd/spec/traits.py).

The machine prices each step; these traits say which steps a worker takes (a read, or none where its copy
still is θ), what it does while a lock is taken (spin, then yield; or sleep), whether its loss snapshot is
inside the update, and whether its bookkeeping between cycles is priced. Every mechanism that depends on
them asks here, so one scenario key decides them all.
"""

from __future__ import annotations

from simasgd.runs import backends
from simasgd.spec.scenario import Scenario
from simasgd.spec.traits import ExecutorTraits


def executor_traits(sc: Scenario) -> ExecutorTraits:
    """The traits of the backend ``[sim] traits`` names; a ScenarioError naming the key where it declares none
    or is absent from this build."""
    from simasgd.spec.loader import ScenarioError

    name = sc.sim.traits
    try:
        found = backends.traits(name)
    except backends.BackendError as e:
        raise ScenarioError([f"sim.traits = \"{name}\": {e}"]) from None
    if found is None:
        raise ScenarioError([f"sim.traits = \"{name}\": backend {name} declares no executor traits the simulator "
                             f"models; allowed: {', '.join(backends.with_traits())}"])
    return found
