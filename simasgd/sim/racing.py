"""Unlocked writers of the shared model (HOGWILD!, EA-wild's centre): racing chunks.

Two workers that update θ without a lock sweep the same lines in the same order. While both are inside
a chunk, each write must first take its line from the other core, which wants it back: the chunk runs
at ``[coherence] race_gbs`` (:meth:`Writers.chunk`, ``[sim] racing_writes``). HOGWILD!'s odd-numbered
workers sweep from the top down (the executor's ``hogwild_step``, so that two overlapping updates cross
once instead of one trailing the other line by line): a writer sweeping the other way races only where
the two meet. Each writer ends on its own time.
"""

from __future__ import annotations

import simpy

from simasgd.sim.cpu import Cores


class Writers:
    """Who is writing the shared model without a lock, and where in the sweep: the chunk each is inside."""

    __slots__ = ("_at", "_down", "_n", "_next", "cores", "env", "race_s")

    def __init__(self, env: simpy.Environment, cores: Cores, race_s: float, n: int) -> None:
        self.env, self.cores, self.race_s = env, cores, race_s
        self._next = [0] * n  # the index of each worker's next chunk in its update under way
        self._at = [-1] * n  # the chunk each worker is inside now (-1: none)
        self._down = [False] * n  # each worker's sweep in its update under way: from the top down
        self._n = [1] * n  # and its number of chunks

    def begin(self, w: int, chunks: int = 1, down: bool = False) -> None:
        """Worker ``w`` begins an unlocked update of ``chunks`` chunks, from the top down where ``down``:
        its next chunk is the sweep's first."""
        self._next[w], self._n[w], self._down[w] = 0, chunks, down

    def _span(self, v: int, i: int) -> tuple[float, float]:
        """Where in the model ``v``'s ``i``-th chunk of its sweep lies, as fractions of it."""
        n = self._n[v]
        at = n - 1 - i if self._down[v] else i
        return at / n, (at + 1) / n

    def _crossing(self, w: int, i: int, others: list[int]) -> bool:
        """Another writer sweeping the other way is inside this chunk or the next: the two meet here."""
        lo, hi = self._span(w, i)
        for v in others:
            vlo, vhi = self._span(v, self._at[v])
            if vlo <= hi and lo <= vhi:
                return True
        return False

    def chunk(self, w: int, part: float, seconds: float) -> simpy.Event:
        """``w``'s next chunk, a ``part`` of its update, ``seconds`` alone.

        While another worker holding its CPU and sweeping the same way is inside a chunk of its own, both
        write lines both caches hold and each write must first take its line from the other core, which
        wants it back: the chunk runs at the racing rate where slower (calibrated so: two threads copy a
        buffer, meet, then update it at once; 680 KB, 2 MB of L2 a core: 94–121 µs against 35 µs for an
        update after the other's). A writer sweeping the other way (HOGWILD!'s odd-numbered workers write
        from the top down) races with this chunk only where the two meet, inside this chunk or the next;
        elsewhere each writes lines the other is not writing."""
        i = self._next[w]
        self._next[w] = i + 1
        on = [v for v in range(len(self._at)) if v != w and self.cores.on_cpu(v) and self._at[v] >= 0]
        same = [v for v in on if self._down[v] == self._down[w]]
        race = bool(same) or (len(same) < len(on) and
                              self._crossing(w, i, [v for v in on if self._down[v] != self._down[w]]))
        if race:
            seconds = max(seconds, self.race_s * part)
        done = self.cores.work(w, seconds)
        self._at[w] = i

        def leave(_: simpy.Event) -> None:
            self._at[w] = -1

        done.callbacks.append(leave)
        return done
