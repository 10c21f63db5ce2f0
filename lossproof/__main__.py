"""``python -m lossproof``: the ``lossproof`` command."""
import sys

from lossproof.conformance.cli import main

sys.exit(main())
