"""The fidelity corpus: measured cells of every machine, kept compact (:mod:`.store`) and scored against
today's simulator (:mod:`.score`)."""
