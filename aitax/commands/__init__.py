"""The `aitax` subcommands (click), one module per capability, in the order a frame flows through the product.

Each module's `register(root)` adds its commands. A command resolves its settings once (flags, a pod's environment,
the local stack; `options.py` holds the shared ones) and calls the libraries below with plain values; no library
sees click.
"""
