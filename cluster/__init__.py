"""A real single-node Kubernetes cluster on this machine, the images it runs, and kubectl/helm."""
