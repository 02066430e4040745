"""Reading results: staleness statistics, simulated against measured, stability, phases, drift, prediction bands
and figures."""
