"""A 2-core ``this`` machine with caches, warm copy rates and coherence, for the simulator's mechanism tests.

Imported by name (pytest puts this folder on ``sys.path``), not collected: no ``test_`` prefix.
"""

from __future__ import annotations


def two_core_lines(held_write: list[float]) -> list[str]:
    """Profile lines: ``[machine]``, ``[cache]``, ``[copy_by_size]`` and ``[coherence]`` with writes of lines
    both caches hold at ``held_write`` GB/s."""
    return ["[machine]", "sockets = 1", "cores_per_socket = 2", "threads_per_core = 1",
            "local_latency_ns = 90.0", "remote_latency_ns = 90.0", "mem_bandwidth_gbs = 10.0",
            "link_bandwidth_gbs = 10.0", "gflops_per_core = 1.0", "quantum_s = 0.004",
            "context_switch_s = 2e-6", "", "[cache]", "line_bytes = 64", "levels = [1, 2, 3]",
            "sizes_bytes = [49152, 1048576, 33554432]", "shared_by = [1, 1, 2]", "",
            "[copy_by_size]", "sizes_bytes = [65536, 262144, 1048576, 4194304]", "gbs = [100.0, 80.0, 60.0, 20.0]",
            "update_gbs = [300.0, 200.0, 150.0, 50.0]", "",
            "[coherence]", "sizes_bytes = [65536, 1048576, 4194304]", "read_gbs = [100.0, 60.0, 20.0]",
            "write_gbs = [120.0, 90.0, 40.0]", "held_read_gbs = [100.0, 60.0, 20.0]",
            f"held_write_gbs = {held_write}", ""]
