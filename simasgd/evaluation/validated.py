"""How far the simulator's shared-memory model is measured to carry: a note where a run goes past it.

The fidelity corpus (``corpus/``, benchmarks/fidelity.md) measures the model against real threads. It meets
most of its ceiling on the 2-CPU machines and little on the 16-core one: there a step on θ costs more with
more cores running, which the model does not have yet. A simulated run of a shared-memory algorithm
with more workers computing at once than that gets a note saying so before it starts."""

from __future__ import annotations

# The most cores the corpus's machines measured the model on where it meets most of its ceiling.
VALIDATED_BUSY_CORES = 2


def busy_cores(workers: int, cores: int) -> int:
    """Workers that can compute at once: one a core, at most the machine's cores."""
    return max(0, min(workers, cores))


def note(workers: int, cores: int, algorithm: str, networked: bool) -> str | None:
    """The note for ``workers`` of ``algorithm`` on a machine of ``cores`` cores, or None within the measured
    range (or over a network, which the shared-memory figures do not reach)."""
    busy = busy_cores(workers, cores)
    if networked or busy <= VALIDATED_BUSY_CORES:
        return None
    return (f"note: {busy} workers of {algorithm} computing at once; the simulator's shared-memory model holds "
            f"on the measured machines of {VALIDATED_BUSY_CORES} CPUs, not on the 16-core one "
            f"(benchmarks/fidelity.md): read its updates/s and τ̄ as rough")
