"""`python -m explorer.bench …`: the command the README and issues name, kept where it always was.

Only a dispatcher: the app's benches live in `explorer.benches` (live.py: keystroke and
generation latency through the real widgets; training.py: responsiveness while training).
"""
from __future__ import annotations

import sys

from explorer.benches.live import main

if __name__ == "__main__":
    sys.exit(main())
