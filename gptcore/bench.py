"""`python -m gptcore.bench …`: the command the README and issues name, kept where it always was.

Only a dispatcher: the benches themselves live in `gptcore.benches` (apart from the library
modules); see that package for what each measures.
"""
from __future__ import annotations

import sys


def main(argv=None) -> int:
    from .benches import hf_compare

    return hf_compare.main(argv)


if __name__ == "__main__":
    sys.exit(main())
