"""lossproof conformance: the contract (catalog), the vectors, the harness and the CLI."""

__version__ = "0.1.0"
