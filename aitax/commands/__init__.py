"""The `aitax` subcommands, one module per capability, in the order a frame flows through the product.

Each module's `register(subparsers)` adds its commands. A command resolves its settings once (flags, a pod's
environment, the local stack) and calls the libraries below with plain values; no library sees argparse.
"""
