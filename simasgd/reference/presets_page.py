"""The preset catalogue: every machine, GPU and network preset with its numbers and where each comes from
(:mod:`simasgd.machines.provenance`), and the measured machines of the shipped corpus. ``simasgd list --presets`` shows
every number of the same presets, without the sources."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from simasgd.reference.common import HEADER, cell, field_comments, unit

ROOT = Path(__file__).resolve().parents[2]
MACHINE_HEAD = ("preset", "sockets × cores × threads", "base GHz", "DRAM GB/s a socket", "link GB/s",
                "latency ns (local / remote)", "GFLOP/s a core", "L3 MB a socket")
NETWORK_HEAD = ("preset", "Gb/s a NIC", "one-way µs")


def fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "(" + ", ".join(fmt(x) for x in v) + ")" if v else "()"
    return str(v)


def machine_row(m: Any) -> tuple[str, ...]:
    """A CPU machine's key numbers, in :data:`MACHINE_HEAD`'s order (0 = not modelled: "—")."""
    def opt(v: float) -> str:
        return fmt(v) if v else "—"
    nodes = " (nodes)" if getattr(m, "nodes", False) else ""
    return (m.name, f"{m.sockets} × {m.cores_per_socket} × {m.threads_per_core}{nodes}", opt(m.base_ghz),
            f"{m.mem_bandwidth_gbs:.3g}", "—" if m.nodes else f"{m.link_bandwidth_gbs:.3g}",
            f"{m.local_latency_ns:.3g} / {m.remote_latency_ns:.3g}", f"{m.gflops_per_core:.3g}", opt(m.llc_mb))


def machine_rows() -> list[tuple[str, ...]]:
    from simasgd.machines import machine

    return [machine_row(m) for m in machine.PRESETS.values()]


def network_rows() -> list[tuple[str, ...]]:
    from simasgd.machines import networks

    def none(name: str) -> str:
        return "measured ([network] of the profile)" if name == networks.MEASURED else "shared memory"
    return [(name, none(name) if v is None else fmt(v[0]), "" if v is None else fmt(v[1]))
            for name, v in networks.PRESETS.items()]


def corpus_rows(folder: Path | None = None) -> list[tuple[str, ...]]:
    """The measured machines of ``folder`` (default: the shipped ``corpus/``): (preset, CPU, cells,
    then :data:`MACHINE_HEAD`'s numbers from the calibrated profile's ``[machine]``)."""
    from simasgd.corpus import store
    from simasgd.machines import machine, profile

    rows = []
    for path in store.machines(folder or ROOT / "corpus"):
        entry = store.load(path)
        m = machine.from_profile(profile.typed(entry.profile, path), entry.name, path)
        rows.append((entry.name, str(entry.machine.get("cpu_model") or "?"), str(len(entry.cells)),
                     *machine_row(m)[1:]))
    return rows


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(cell(c) for c in r) + " |" for r in rows)]


def _cited(title: str, obj: Any, cited: Any, keys: list[str]) -> list[str]:
    """A preset's section: what it is, then each citation beside the values it sources, then its notes."""
    def value(k: str) -> str:
        v, u = getattr(obj, k), ("/s" if k.endswith("_per_s") else unit(k))
        return f"`{k}` = " + (f"{fmt(v)} {u}".strip() if u and not isinstance(v, tuple) else fmt(v))
    out = [f"### `{title}`", "", cited.what, "", "| values | source |", "|---|---|"]
    for group, text in cited.sources.items():
        shown = [value(k) for k in group.split() if k in keys]
        out.append(f"| {cell(', '.join(shown))} | {cell(text)} |")
    if cited.notes:
        out += ["", cited.notes]
    return [*out, ""]


def presets_page() -> str:
    from simasgd.machines import gpus, machine, networks

    keys = [f.name for f in fields(machine.Machine) if f.name not in ("name", "profile")]
    comments = field_comments(machine.Machine)
    out = [HEADER + "# Machine, GPU and network presets", "",
           ("Every machine a scenario can name without measuring it, with its numbers and, for each number, "
            "where it comes from: a vendor datasheet or a published measurement, or the derivation and its "
            "reason. A source marked *checked* was read when the preset was written; *as recalled* was not (no "
            "copy at hand) and may be off; *an estimate* is a derivation, not a measurement. Generated from "
            "the presets' code (`simasgd/machines/machine.py`, `simasgd/machines/gpus.py`, "
            "`simasgd/sim/network.py`), where each "
            "citation sits beside its number. `simasgd list --presets` shows every number."), "",
           ("Use one with `[machine] preset = \"NAME\"` (keys given beside it override its values) and "
            "`[network] preset = \"NAME\"`; [the scenario format](scenario.md) lists the keys."), "",
           "## CPU machines (`[machine] preset`)", "",
           *_table(MACHINE_HEAD, machine_rows()), "",
           "What each key means:", "",
           *(f"- `{k}`: {comments[k]}" for k in keys if comments.get(k)), ""]
    for name, m in machine.PRESETS.items():
        out += _cited(name, m, machine.CITATIONS[name], keys)
    out += ["## Measured machines of the corpus", "",
            ("Each machine of the fidelity corpus ([the corpus](../corpus.md), `corpus/<name>.json.gz`) is a "
             "preset by its name: `[machine] preset = \"amd_epyc_2vcpu\"` simulates the entry's calibrated "
             "profile exactly as `preset = \"this\"` simulates this machine's, and as `simasgd corpus score` "
             "simulates the entry's cells. Its numbers are that machine's measurements "
             "([the profile format](../profile.md) says how each is taken); the columns below are its "
             "profile's `[machine]` table. `SIMASGD_CORPUS` names another corpus folder."), "",
            *_table(("preset", "CPU", "cells", *MACHINE_HEAD[1:]), corpus_rows()), ""]
    gkeys = [f.name for f in fields(gpus.Gpu) if f.name not in ("name", "profile")]
    gcomments = field_comments(gpus.Gpu)
    out += ["## GPUs (`[machine] preset`)", "",
            ("A GPU preset makes the machine one GPU (simasgd/sim/gpu.py): each worker a CUDA stream, the streams "
             "sharing its SMs, memory and atomic units. `this-gpu` is the calibrated profile's `[gpu]` table "
             "(`simasgd calibrate --gpu`)."), "",
            *(f"- `{k}`: {gcomments[k]}" for k in gkeys if gcomments.get(k)), ""]
    for name, g in gpus.PRESETS.items():
        out += _cited(name, g, gpus.SOURCES[name], gkeys)
    out += ["## Networks (`[network] preset`)", "",
            ("A worker's NIC bandwidth (line rate) and the one-way latency of a message "
             "([the model](../model.md#network-and-the-distributed-algorithms-simasgdsimnetworkpy))."), "",
            "| preset | Gb/s a NIC | one-way µs | what | bandwidth source | latency source |",
            "|---|---|---|---|---|---|"]
    for name, gbps, us in network_rows():
        c = networks.SOURCES[name]
        out.append(f"| `{name}` | {gbps} | {us} | {cell(c.what)} | {cell(c.source_of('bandwidth') or '')} | "
                   f"{cell(c.source_of('latency') or '')} |")
    out += [""] + [f"`{n}`: {c.notes}" for n, c in networks.SOURCES.items() if c.notes]
    out += ["", "## An 8-GPU H100 node: what a run models", "",
            ("The simulator has no machine of several GPUs. For a DGX H100 (8 × H100 SXM5, NVLink 4 through "
             "NVSwitch, 2 × Xeon Platinum 8480C) it offers three pieces, each modelling what its section "
             "says and nothing more:"), "",
            "- `[machine] preset = \"dgx-h100-host\"`: the node's two CPUs, for workers that are CPU threads;",
            "- `[machine] preset = \"h100\"`: ONE H100, whose SMs the workers' streams share;",
            ("- `[network] preset = \"nvlink4\"`: messages between workers at one GPU's NVLink 4 rate through "
             "NVSwitch."), "",
            ("Combined (`h100` with `nvlink4`), the workers are streams of one GPU whose messages take NVLink's "
             "time: 8 GPUs' compute, each GPU's own memory and their NVSwitch fabric are not modelled. A cluster "
             "of DGX nodes is not modelled either."), ""]
    return "\n".join(out)
