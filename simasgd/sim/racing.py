"""Unlocked writers of the shared model (HOGWILD!, EA-wild's centre): racing chunks and convoys.

Two workers that update θ without a lock sweep the same lines in the same order. While both are inside
a chunk, each write must first take its line from the other core, which wants it back: the chunk runs
at ``[coherence] race_gbs`` (:meth:`Writers.chunk`, ``[sim] racing_writes``). HOGWILD!'s odd-numbered
workers sweep from the top down (the executor's ``hogwild_step``, to break the convoys below): a writer
sweeping the other way races only where the two meet.

**Convoys** (``[sim] write_convoys``). The later writer cannot overtake the other: a chunk the other is
writing now it can finish only after the other's last line of it, one line's hand-off between the cores
later (the profile's ``[c2c] latency_ns``, else the lock hand-off), and a chunk the other has left
behind is lines the other wrote, taken at the update's own rate, so the follower catches up with a
leader slowed by lines both caches held. The two then end one hand-off apart. Measured in the
executor's HOGWILD! at 2 threads, B = 16, two CPUs sharing an L3 (three runs): of the
updates that overlapped another, 90-96% of those that began within 4 µs of it and 84% of those
20-30 µs behind ended within 2 µs after it, the median gap between the two ends 25-40 ns, the
core-to-core hand-off of 31-37 ns. Chunk by chunk, the first of a worker's
update alone stays a whole update on its own; a leader that loses its CPU holds its follower.

Where the executor's bookkeeping between a bump of the version and the next read of it (the record, the
budget check, the clock: ``Platform.bookkeeping``, about 100 ns) outlasts that hand-off, the leader reads a
version that already counts the follower's update, and its next update has τ = 0 while the follower's has
τ = 1: the 9-19% of updates at τ = 0 measured there, where a simulator whose writers end apart had 0.3%.
"""

from __future__ import annotations

from collections.abc import Generator

import simpy

from simasgd.sim.cpu import Cores


class Writers:
    """Who is writing the shared model without a lock, and where in the sweep: the chunk each is inside."""

    __slots__ = ("_at", "_done", "_down", "_n", "_next", "convoys", "cores", "env", "handoff_s", "race_s")

    def __init__(self, env: simpy.Environment, cores: Cores, race_s: float, handoff_s: list[float],
                 convoys: bool) -> None:
        self.env, self.cores, self.race_s, self.handoff_s, self.convoys = env, cores, race_s, handoff_s, convoys
        n = len(handoff_s)
        self._next = [0] * n  # the index of each worker's next chunk in its update under way
        self._at = [-1] * n  # the chunk each worker is inside now (-1: none)
        self._done: list[simpy.Event | None] = [None] * n  # with convoys: fires when that chunk's last line is written
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

        A writer sweeping the other way (HOGWILD!'s odd-numbered workers write from the top down) races
        with this chunk only where the two meet, inside this chunk or the next; elsewhere each writes lines
        the other is not writing. Among writers sweeping the same way:

        Without convoys, while another worker holding its CPU is inside a chunk of its own, both write lines
        both caches hold and each write must first take its line from the other core, which wants it back:
        the chunk runs at the racing rate where slower (calibrated so: two threads copy a buffer, meet, then
        update it at once; 680 KB, 2 MB of L2 a core: 94–121 µs against 35 µs for an update after
        the other's). With convoys, where each is in the sweep counts: another inside the chunk before,
        right behind, makes this one race; another inside this same chunk, begun first, is ahead, and this
        chunk ends no earlier than the other's plus one line's hand-off, its lines taken as the other
        leaves them. A chunk the others have left behind holds lines they wrote, taken at the update's
        own rate (another core's lines), so a follower catches up with a leader slowed by lines both caches
        held, and the two then move together, a hand-off apart."""
        i = self._next[w]
        self._next[w] = i + 1
        on = [v for v in range(len(self._at)) if v != w and self.cores.on_cpu(v) and self._at[v] >= 0]
        same = [v for v in on if self._down[v] == self._down[w]]
        crossing = len(same) < len(on) and self._crossing(w, i, [v for v in on if self._down[v] != self._down[w]])
        if not self.convoys:  # inside any chunk of the same sweep: both race, each on its own time
            ahead, race = [], bool(same) or crossing
        else:
            ahead = [v for v in same if self._at[v] == i]
            race = crossing or (i > 0 and any(self._at[v] == i - 1 for v in same))
        if race:
            seconds = max(seconds, self.race_s * part)
        waits = [e for e in (self._done[v] for v in ahead) if e is not None]
        done = self.cores.work(w, seconds) if not waits else self.env.process(self._behind(w, seconds, waits))
        # only a convoy's follower waits on a chunk's end: no event per chunk without convoys (the hot path)
        mine = self.env.event() if self.convoys else None
        self._at[w], self._done[w] = i, mine

        def leave(_: simpy.Event) -> None:
            self._at[w], self._done[w] = -1, None
            if mine is not None:
                mine.succeed(self.env.now)  # its value: when the chunk's last line was written

        done.callbacks.append(leave)
        return done

    def _behind(self, w: int, seconds: float, ahead: list[simpy.Event]) -> Generator[simpy.Event, object, None]:
        """A chunk written behind another writer of it: its own time, and no earlier than one hand-off after the
        other's last line of it (taken from the other's core)."""
        yield self.cores.work(w, seconds)
        if not all(e.triggered for e in ahead):
            yield self.env.all_of(ahead)
        wait = max(float(e.value or 0.0) for e in ahead) + self.handoff_s[w] - self.env.now  # values: end times
        if wait > 0:
            yield self.cores.work(w, wait)
