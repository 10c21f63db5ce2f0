import sys

from lossproof.conformance.cli import main

sys.exit(main())
