"""The ground floor: what every other package may import and which imports none of them (errors, paths,
child processes)."""
