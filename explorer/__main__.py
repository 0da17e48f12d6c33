"""`python -m explorer` — the same as the `gpt-explorer` command."""
import sys

from explorer.app import main

sys.exit(main())
