"""Does the simulator order the algorithms as the machine does?

For each group of a machine's cells that differ only in the algorithm (the same threads and batch size), the
cells are ranked by speed twice — by updates/s (higher is faster) and by time to ε (lower is faster) — once
by the simulated mean and once by the measured mean, and compared two ways:

- **Kendall's τ-b** between the two orderings over the group's cells (:func:`kendall_tau_b`): 1 the same
  order, −1 reversed; ties (a cell whose runs never reached ε is slowest, as +∞, and two such tie) are
  counted as τ-b counts them, so a group whose sides tie differently is not scored as a perfect order.
- **The fastest**, named by both sides: judged only where the machine's own runs agree which algorithm is
  fastest (:func:`machine_fastest`), and right when the simulator puts that algorithm strictly ahead of every
  other.

The agreement rule is a complete separation: the fastest by measured mean has *every* run faster than
*every* run of each other algorithm of the group. Under the hypothesis that two algorithms run alike (their
runs exchangeable), the chance that one's m runs all beat the other's n is 1 / C(m + n, m) — 1/20 at three
runs each, the exact one-sided Mann–Whitney test at the 5% level and the smallest p-value three runs a side
can reach. A bootstrap interval would be no better founded at three runs: it draws only from those three
values, and its interval is narrower than the truth.

Two more views of a group, from the machine's runs alone, say how much of τ the machine's own noise leaves
to be had:

- **Decided pairs** (:func:`decided_pairs`): the pairs of algorithms the machine's runs separate by the same
  rule (every run of one faster than every run of the other), and of those, how many the simulator orders
  the same way. A pair the runs do not separate counts in τ as much as one they do; there it is the runs'
  scatter that τ scores.
- **The replica τ** (:func:`replica_tau`): the τ-b of one run of each algorithm against the mean of its other
  runs, averaged over every such choice of runs — what one more run of the machine, taken as the
  prediction, would score. Not a bound: a prediction that scatters less than a run (a simulator's mean)
  can pass it, as it can pass the replica share of the cell score.

The goal (issue 51): the fastest right in every group where the machine agrees, τ ≥ 0.8.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# What a cell is ranked by: its scalar, and whether higher is faster.
METRICS: dict[str, bool] = {"updates_per_s": True, "time_to_eps": False}
TAU_GOAL = 0.8


@dataclass(frozen=True)
class Speeds:
    """One cell as the ranking sees it: its algorithm, group, simulated mean and measured runs per metric."""

    algorithm: str
    threads: int
    batch: int
    simulated: dict[str, float]          # the simulated runs' mean (+∞: a run never reached ε)
    measured: dict[str, list[float]]     # the measured runs, one value each (+∞: never reached ε)

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "threads": self.threads, "batch": self.batch,
                "simulated": {k: _num(v) for k, v in self.simulated.items()},
                "measured": {k: [_num(x) for x in v] for k, v in self.measured.items()}}


def algorithm_label(scenario: dict[str, Any]) -> str:
    """``name`` and its parameters as the scenario gives them, e.g. ``leashed persistence=0``."""
    algo = dict(scenario.get("algorithm") or {})
    name = str(algo.pop("name", "?"))
    params = " ".join(f"{k}={_fmt(v)}" for k, v in sorted(algo.items()))
    return f"{name} {params}".strip()


def speeds_of(scenario: dict[str, Any], simulated: dict[str, np.ndarray],
              measured: dict[str, np.ndarray]) -> Speeds:
    """A cell's :class:`Speeds` from its scenario and both sides' per-run scalars (as
    :func:`simasgd.evaluation.fidelity.run_stats` gives them; NaN time to ε: never reached, ranked as +∞)."""
    workload = scenario.get("workload") or {}
    return Speeds(algorithm_label(scenario), int((scenario.get("workers") or {}).get("count", 0)),
                  int(workload.get("batch_size", 0)),
                  {k: _mean(_slow(simulated[k], k)) for k in METRICS},
                  {k: [float(x) for x in _slow(measured[k], k)] for k in METRICS})


def _slow(x: np.ndarray, metric: str) -> np.ndarray:
    """A run that never reached ε (NaN) as the slowest there is; an undefined rate as none at all."""
    x = np.asarray(x, dtype=float)
    return np.where(np.isnan(x), 0.0 if METRICS[metric] else math.inf, x)


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x)) if len(x) else math.nan


# --- the statistics ---------------------------------------------------------------------------

def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's τ-b of two paired samples: (C − D) / √((P − Tₓ)(P − T_y)) over the P = n(n − 1)/2 pairs, C
    concordant, D discordant, Tₓ and T_y the pairs tied in x and in y (a pair tied in both counts in both).
    ±∞ compare as numbers do (two +∞ tie). NaN where either side has fewer than two distinct values."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"kendall_tau_b: paired 1-d samples needed, got shapes {a.shape} and {b.shape}")
    return float(_tau_b_rows(a[None, :], b[None, :])[0])


def machine_fastest(runs: Mapping[str, Sequence[float]], higher_is_faster: bool) -> str | None:
    """The algorithm the machine's own runs agree is fastest: the best by mean, where every one of its runs is
    strictly faster than every run of each other algorithm; None where they do not agree (or fewer than two
    algorithms). See the module's docstring for why complete separation."""
    if len(runs) < 2:
        return None
    sign = 1.0 if higher_is_faster else -1.0
    means = {k: sign * float(np.mean(v)) if len(v) else -math.inf for k, v in runs.items()}  # higher is faster
    best = max(means, key=lambda k: means[k])
    decided = set(decided_pairs(runs, higher_is_faster))
    return best if all((best, k) in decided for k in runs if k != best) else None


def decided_pairs(runs: Mapping[str, Sequence[float]], higher_is_faster: bool) -> list[tuple[str, str]]:
    """The pairs (faster, slower) whose runs the machine separates: every run of the first strictly faster
    than every run of the second (the rule of :func:`machine_fastest`, pair by pair)."""
    sign = 1.0 if higher_is_faster else -1.0
    names = [k for k, v in runs.items() if len(v)]
    lo = {k: float(np.min(sign * np.asarray(runs[k], dtype=float))) for k in names}
    hi = {k: float(np.max(sign * np.asarray(runs[k], dtype=float))) for k in names}
    return [(a, b) for a in names for b in names if a != b and lo[a] > hi[b]]


def replica_tau(runs: Mapping[str, Sequence[float]], limit: int = 4096) -> float:
    """Kendall's τ-b of one run of each algorithm against the mean of the others' runs, over every choice of
    one run per algorithm (``limit`` choices at most: beyond, that many drawn with a fixed seed, so that the
    same runs give the same value); NaN where an algorithm has fewer than two runs or fewer than two
    algorithms. ±∞ (never reached ε) stays ±∞ in a mean it enters."""
    values = [np.asarray(v, dtype=float) for v in runs.values()]
    if len(values) < 2 or any(len(v) < 2 for v in values):
        return math.nan
    sizes = [len(v) for v in values]
    total = math.prod(sizes)
    if total <= limit:
        picks = np.array(list(itertools.product(*(range(n) for n in sizes))))
    else:
        rng = np.random.default_rng(0)
        picks = np.stack([rng.integers(0, n, limit) for n in sizes], axis=1)
    one = np.stack([v[picks[:, a]] for a, v in enumerate(values)], axis=1)
    rest = np.stack([_rest_means(v)[picks[:, a]] for a, v in enumerate(values)], axis=1)
    taus = _tau_b_rows(one, rest)
    taus = taus[np.isfinite(taus)]
    return float(taus.mean()) if len(taus) else math.nan


def _rest_means(v: np.ndarray) -> np.ndarray:
    """For each run, the mean of the others (an infinite one among them makes it infinite)."""
    return np.array([float(np.mean(np.delete(v, i))) for i in range(len(v))])


def _tau_b_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`kendall_tau_b` of each row of ``x`` against the same row of ``y``."""
    i, j = np.triu_indices(x.shape[1], k=1)
    sa = np.sign(np.greater(x[:, i], x[:, j]).astype(int) - np.less(x[:, i], x[:, j]).astype(int))
    sb = np.sign(np.greater(y[:, i], y[:, j]).astype(int) - np.less(y[:, i], y[:, j]).astype(int))
    pairs = len(i)
    denom = np.sqrt((pairs - np.sum(sa == 0, axis=1)) * (pairs - np.sum(sb == 0, axis=1)).astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, np.sum(sa * sb, axis=1) / np.where(denom > 0, denom, 1.0), np.nan)


def simulated_fastest(means: dict[str, float], higher_is_faster: bool) -> str | None:
    """The algorithm whose simulated mean is strictly ahead of every other's; None at a tie for the lead."""
    if not means:
        return None
    sign = 1.0 if higher_is_faster else -1.0
    order = sorted(means, key=lambda k: sign * means[k], reverse=True)
    if len(order) > 1 and sign * means[order[0]] <= sign * means[order[1]]:
        return None
    return order[0]


# --- per group, per machine -------------------------------------------------------------------

@dataclass
class Order:
    """One metric's verdict in one group."""

    tau: float                  # Kendall's τ-b, simulated means against measured means (NaN: undefined)
    machine: str | None         # the fastest the machine's runs agree on (None: they do not agree)
    simulated: str | None       # the simulator's fastest (None: a tie for the lead)
    measured_best: str          # the fastest by measured mean, agreed or not
    replica: float = math.nan   # the machine's own τ: one run of each against the others' mean
    decided: int = 0            # pairs of algorithms the machine's runs separate
    decided_right: int = 0      # of those, the pairs the simulator orders the same way (strictly)

    @property
    def right(self) -> bool | None:
        """The simulator names the fastest the machine agrees on (None: the machine does not agree)."""
        return None if self.machine is None else self.simulated == self.machine

    def to_json(self) -> dict[str, Any]:
        return {"tau": _num(self.tau), "machine_fastest": self.machine, "simulated_fastest": self.simulated,
                "measured_best": self.measured_best, "fastest_right": self.right, "replica_tau": _num(self.replica),
                "decided_pairs": self.decided, "decided_right": self.decided_right}


@dataclass
class GroupRanking:
    machine: str
    threads: int
    batch: int
    algorithms: list[str]
    orders: dict[str, Order] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"machine": self.machine, "threads": self.threads, "batch": self.batch,
                "algorithms": self.algorithms, **{k: o.to_json() for k, o in self.orders.items()}}


def rank_group(machine: str, cells: Sequence[Speeds]) -> GroupRanking:
    """The group's orders by each metric of :data:`METRICS` (the cells share threads and batch size)."""
    if len({(c.threads, c.batch) for c in cells}) > 1:
        raise ValueError(f"rank_group: cells of {machine} from several groups: "
                         f"{sorted({(c.threads, c.batch) for c in cells})}")
    names = _unique([c.algorithm for c in cells])
    out = GroupRanking(machine, cells[0].threads if cells else 0, cells[0].batch if cells else 0, names)
    for metric, higher in METRICS.items():
        sim = [c.simulated[metric] for c in cells]
        meas = [_mean(np.asarray(c.measured[metric], dtype=float)) for c in cells]
        runs = {n: c.measured[metric] for n, c in zip(names, cells, strict=True)}
        sign = 1.0 if higher else -1.0
        best = max(zip(names, meas, strict=True), key=lambda t: sign * t[1])[0] if cells else ""
        simulated = dict(zip(names, sim, strict=True))
        pairs = decided_pairs(runs, higher)
        right = sum(sign * simulated[a] > sign * simulated[b] for a, b in pairs)
        out.orders[metric] = Order(kendall_tau_b(sim, meas), machine_fastest(runs, higher),
                                   simulated_fastest(simulated, higher), best, replica_tau(runs),
                                   len(pairs), right)
    return out


def rank(machine: str, cells: Iterable[Speeds]) -> list[GroupRanking]:
    """Every (threads, batch) group of a machine's cells, in order of threads then batch."""
    groups: dict[tuple[int, int], list[Speeds]] = {}
    for c in cells:
        groups.setdefault((c.threads, c.batch), []).append(c)
    return [rank_group(machine, groups[k]) for k in sorted(groups)]


@dataclass
class Summary:
    """One metric over a machine's groups."""

    groups: int            # groups where τ is defined
    tau_mean: float
    tau_min: float
    tau_met: int           # groups with τ ≥ TAU_GOAL
    agreed: int            # groups where the machine's runs agree which is fastest
    right: int             # of those, the simulator names it
    replica_mean: float = math.nan   # the machine's own τ, over the groups where it is defined
    replica_met: int = 0             # groups whose replica τ reaches TAU_GOAL
    decided: int = 0                 # pairs the machine's runs separate, over the groups
    decided_right: int = 0           # of those, ordered the same way by the simulator

    @property
    def goal(self) -> bool:
        """Issue 51's goal: the fastest right wherever the machine agrees, and τ ≥ 0.8 in every group."""
        return self.right == self.agreed and self.tau_met == self.groups

    def to_json(self) -> dict[str, Any]:
        return {"groups": self.groups, "tau_mean": _num(self.tau_mean), "tau_min": _num(self.tau_min),
                "tau_met": self.tau_met, "agreed": self.agreed, "fastest_right": self.right, "goal": self.goal,
                "replica_tau_mean": _num(self.replica_mean), "replica_tau_met": self.replica_met,
                "decided_pairs": self.decided, "decided_right": self.decided_right}


def summary(groups: Sequence[GroupRanking], metric: str) -> Summary:
    taus = np.array([g.orders[metric].tau for g in groups], dtype=float)
    taus = taus[np.isfinite(taus)]
    replicas = np.array([g.orders[metric].replica for g in groups], dtype=float)
    replicas = replicas[np.isfinite(replicas)]
    verdicts = [g.orders[metric].right for g in groups]
    return Summary(len(taus), float(taus.mean()) if len(taus) else math.nan,
                   float(taus.min()) if len(taus) else math.nan, int(np.sum(taus >= TAU_GOAL)),
                   sum(v is not None for v in verdicts), sum(v is True for v in verdicts),
                   float(replicas.mean()) if len(replicas) else math.nan, int(np.sum(replicas >= TAU_GOAL)),
                   sum(g.orders[metric].decided for g in groups), sum(g.orders[metric].decided_right for g in groups))


SHORT = {"updates_per_s": "upd/s", "time_to_eps": "time→ε"}
GROUP_HEAD = ("machine", "threads", "B", "algorithms", "τ upd/s (replica)", "decided pairs upd/s",
              "fastest upd/s: machine / sim", "τ time→ε (replica)", "decided pairs time→ε",
              "fastest time→ε: machine / sim")
SUMMARY_HEAD = ("machine", "groups", "τ upd/s mean (min); replica", "τ upd/s ≥ 0.8: sim, replica",
                "decided pairs upd/s", "fastest upd/s right", "τ time→ε mean (min); replica",
                "τ time→ε ≥ 0.8: sim, replica", "decided pairs time→ε", "fastest time→ε right")


def group_rows(groups: Sequence[GroupRanking]) -> list[list[str]]:
    """Rows of :data:`GROUP_HEAD`: τ with the machine's own (replica) τ in parentheses; the decided pairs as
    right / decided; a fastest the machine does not agree on shown as its best by mean, in parentheses, and
    not judged."""
    rows = []
    for g in groups:
        row = [g.machine, str(g.threads), str(g.batch), str(len(g.algorithms))]
        for metric in METRICS:
            o = g.orders[metric]
            mark = "" if o.right is None else (" ✓" if o.right else " ✗")
            said = o.machine if o.machine is not None else f"({o.measured_best})"
            row += [f"{_tau(o.tau)} ({_tau(o.replica)})", f"{o.decided_right}/{o.decided}",
                    f"{said} / {o.simulated or 'tie'}{mark}"]
        rows.append(row)
    return rows


def summary_rows(by_machine: Mapping[str, Sequence[GroupRanking]]) -> list[list[str]]:
    rows = []
    for machine, groups in by_machine.items():
        row = [machine, str(len(groups))]
        for metric in METRICS:
            s = summary(groups, metric)
            row += [f"{_tau(s.tau_mean)} ({_tau(s.tau_min)}); {_tau(s.replica_mean)}",
                    f"{s.tau_met}/{s.groups}, {s.replica_met}/{s.groups}",
                    f"{s.decided_right}/{s.decided}", f"{s.right}/{s.agreed}"]
        rows.append(row)
    return rows


def _tau(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:+.2f}"


def _unique(names: list[str]) -> list[str]:
    """Names made unique (a second cell of one algorithm in a group gets a suffix)."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} #{seen[n]}")
    return out


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _num(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None
