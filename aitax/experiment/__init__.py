"""Experiments: a spec of phases (replicas per stage, acceleration factor, duration) run on a Kubernetes cluster
(scaling the chart's workloads) or on the local stack (as processes)."""
