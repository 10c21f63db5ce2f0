"""Adapters for third-party libraries (TRL, verl, OpenRLHF, Liger-Kernel): one module each, built
on ``_common``; each exposes ``target()`` and documents the library's conventions and findings."""
