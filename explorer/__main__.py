"""`python -m explorer` — the same as the `gpt-explorer` command."""
import sys

from .app import main

sys.exit(main())
