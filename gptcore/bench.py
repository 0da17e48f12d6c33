"""`python -m gptcore.bench …`: the command the README and issues name, kept where it always was.

Only a dispatcher: the benches themselves live in `gptcore.benches` (apart from the library
modules); see that package for what each measures. `--train` selects the training bench
(benches/training.py), `--sae` the sparse-autoencoder bench (benches/sae.py), `--circuits` the
transcoder and attribution-graph bench (benches/circuits.py); anything else is
the inference bench against HF transformers (benches/hf_compare.py).
"""
from __future__ import annotations

import os
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--train" in argv:
        # As `python -m gptcore.train` does: OpenMP threads sleep instead of spinning, which on a
        # shared machine made 2 threads 3-6x slower than 1. Only takes effect before torch loads.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from gptcore.benches import training

        return training.main(argv)
    if "--circuits" in argv:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as for --train: before torch loads
        from gptcore.benches import circuits

        return circuits.main(argv)
    if "--sae" in argv:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as for --train: before torch loads
        from gptcore.benches import sae

        return sae.main(argv)
    from gptcore.benches import hf_compare

    return hf_compare.main(argv)


if __name__ == "__main__":
    sys.exit(main())
