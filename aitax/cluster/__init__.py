"""A real Kubernetes cluster of several nodes on this machine, the images it runs, and kubectl/helm."""
