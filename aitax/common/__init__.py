"""What every floor shares, at the bottom: errors, paths, the paper's numbers, a run's child processes and PID-file
daemons. It imports none of the other packages."""
