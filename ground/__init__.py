"""The ground floor: what every other package may import and which imports none of them (errors, paths, the
paper's numbers, a run's child processes, PID-file daemons)."""
