"""The network presets: each NIC's line rate and one-way latency, with every number's source.

``[network] preset`` names one (:data:`PRESETS`); :data:`SOURCES` cites each number (the catalogue,
docs/reference/presets.md, is generated from them); ``"this"`` (:data:`MEASURED`) is the calibrated profile's
``[network]`` table. The model that times messages over them is :mod:`simasgd.sim.network`.
"""

from __future__ import annotations

from simasgd.machines.provenance import Cited

# name -> (NIC bandwidth Gb/s, one-way latency µs); each one's sources in SOURCES
PRESETS: dict[str, tuple[float, float] | None] = {
    "none": None,              # shared memory: no network
    "1gbe": (1.0, 50.0),       # IEEE 802.3ab; kernel TCP
    "10gbe": (10.0, 30.0),     # IEEE 802.3ae; kernel TCP
    "25gbe": (25.0, 20.0),     # IEEE 802.3by; kernel TCP
    "100gbe": (100.0, 20.0),   # IEEE 802.3ba/cd; kernel TCP
    "100g_ib": (100.0, 1.0),   # InfiniBand EDR 4x (IBTA); RDMA
    "nvlink4": (3600.0, 2.0),  # one H100 SXM5's NVLink 4 ports through NVSwitch (DGX H100)
    "this": None,              # measured: the calibrated profile's [network] (simasgd calibrate --network)
}
_TCP = ("an order of magnitude, not a measurement: a TCP message through the kernel takes tens of µs (Mellanox "
        "2019, \"Paving the road to exascale\": 30-40 µs CPU-onloaded)")
SOURCES: dict[str, Cited] = {
    "none": Cited("Shared memory: no message is timed; reads and updates cost what the machine model says."),
    "1gbe": Cited("Gigabit Ethernet, kernel TCP.", {"bandwidth": "1 Gb/s line rate: IEEE 802.3ab (1000BASE-T)",
                                                    "latency": "50 µs: " + _TCP}),
    "10gbe": Cited("10 Gigabit Ethernet, kernel TCP.", {"bandwidth": "10 Gb/s line rate: IEEE 802.3ae",
                                                        "latency": "30 µs: " + _TCP}),
    "25gbe": Cited("25 Gigabit Ethernet, kernel TCP: the 25 Gb/s cluster.", {
        "bandwidth": "25 Gb/s line rate: IEEE 802.3by", "latency": "20 µs: " + _TCP}),
    "100gbe": Cited("100 Gigabit Ethernet, kernel TCP: the 100 Gb/s cluster on Ethernet.", {
        "bandwidth": "100 Gb/s line rate: IEEE 802.3ba (4 × 25 Gb/s lanes; 802.3cd: 2 × 50)",
        "latency": "20 µs, as 25gbe (the kernel's TCP path, not the line rate, sets it): " + _TCP}),
    "100g_ib": Cited("InfiniBand EDR 4x with RDMA: the 100 Gb/s cluster on InfiniBand.", {
        "bandwidth": "100 Gb/s: IBTA EDR, 4 lanes × 25.78125 Gb/s with 64b/66b encoding (ConnectX-4 user manual, "
                     "docs.nvidia.com/networking)",
        "latency": "1 µs: an RDMA message on InfiniBand, an order of magnitude, not a measurement"}),
    "nvlink4": Cited("The GPU interconnect of a DGX H100: each H100 SXM5's 18 NVLink 4 links into the NVSwitch "
                     "fabric, non-blocking between any two of the 8 GPUs.", {
        "bandwidth": "3600 Gb/s = 450 GB/s each way a GPU: \"18x 4th Gen NVLink, 900GB/s\" (NVIDIA's MLCommons "
                     "system description of its 8 × H200 SXM node, the H100's NVLink 4 / NVSwitch baseboard: "
                     "checked; 900 GB/s counts both directions), 18 links × 25 GB/s each way (Hopper architecture "
                     "whitepaper, as recalled)",
        "latency": "2 µs: an order of magnitude for a small GPU-to-GPU transfer (a CUDA copy's or NCCL "
                   "kernel's launch and completion dominate the wire); NVIDIA publishes no one-way figure"},
        notes="The network model's nodes are the workers: with nvlink4 their messages take NVLink's time, but "
              "their gradients are computed by the scenario's machine — a CPU preset's cores, or with "
              "`machine.preset = \"h100\"` the streams of ONE simulated H100 sharing its SMs. The simulator "
              "models no machine of 8 GPUs (simasgd/sim/gpu.py); a run with nvlink4 says what NVLink-rate "
              "messages cost, not what a DGX H100 does."),
    "this": Cited("Measured: the calibrated profile's [network] table (`simasgd calibrate --network`: the dist "
                  "backend's gloo over TCP loopback on this host)."),
}
MEASURED = "this"
