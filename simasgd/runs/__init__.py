"""Running a backend and keeping what it measured: the registry, the serial and peer backends, the stopping rule,
the results folder and its metadata, process pools, progress."""
