"""`python -m gptcore.benches.sae_lens_check`: our SAE files against SAELens itself (issue 33).

Run it in an interpreter that has sae-lens (`pip install sae-lens torch==<this torch>` in a venv,
then `PYTHONPATH=<checkout> venv/bin/python -m gptcore.benches.sae_lens_check`); the test suite
never needs it. Checks, each printed with its largest difference:

1. an SAE trained and saved here opens with SAELens's `SAE.load_from_disk` as a TopKSAE, and its
   encode and decode equal ours on the same rows;
2. a TopK SAE SAELens saved (random weights) opens with our `load_sae` and encodes and decodes
   as SAELens's own, also with rescale_acts_by_decoder_norm=True and apply_b_dec_to_input=False
   (folded into plain weights on loading).
Exit status 1 if any check fails.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from gptcore.interp.sae.files import load_sae, save_sae
from gptcore.interp.sae.fit import fit_sae

TOL = 1e-5


def _compare(name: str, ours, theirs, x: torch.Tensor) -> bool:
    with torch.no_grad():
        f_ours, f_theirs = ours.encode(x), theirs.encode(x)
        enc = float((f_ours - f_theirs).abs().max())
        dec = float((ours.decode(f_ours) - theirs.decode(f_theirs)).abs().max())
    ok = enc <= TOL and dec <= TOL
    print(f"{'ok  ' if ok else 'FAIL'} {name}: encode max |diff| {enc:.2e}, decode {dec:.2e}")
    return ok


def ours_in_saelens(folder: Path) -> bool:
    from sae_lens import SAE as LensSAE
    from sae_lens.saes.topk_sae import TopKSAE

    gen = torch.Generator().manual_seed(0)
    acts = torch.randn(20_000, 32, generator=gen) @ torch.randn(32, 32, generator=gen) + 3.0
    sae = fit_sae(acts, width=128, k=8, tokens=40_960, batch=1024, hook="blocks.0.hook_resid_post")
    save_sae(sae, folder, model_name="check")
    lens = LensSAE.load_from_disk(str(folder))
    print(f"     SAELens opened ours as {type(lens).__name__}, hook {lens.cfg.metadata.hook_name!r}, k {lens.cfg.k}")
    with torch.no_grad():
        active = (lens.encode(acts[:500]) != 0).sum(dim=1)  # (500,) a TopK encoder keeps exactly k per row
    topk = isinstance(lens, TopKSAE) and bool((active == sae.k).all())
    print(f"{'ok  ' if topk else 'FAIL'} SAELens encodes with exactly k={sae.k} active per row "
          f"({int(active.min())}..{int(active.max())})")
    return topk and _compare("ours -> SAELens", sae, lens, acts[:500])


def saelens_in_ours(folder: Path, **options) -> bool:
    from sae_lens.saes.sae import SAEMetadata
    from sae_lens.saes.topk_sae import TopKSAE, TopKSAEConfig

    torch.manual_seed(1)
    lens = TopKSAE(TopKSAEConfig(d_in=24, d_sae=96, k=6, metadata=SAEMetadata(hook_name="blocks.1.hook_mlp_out"),
                                 **options))
    with torch.no_grad():
        for p in lens.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    lens.save_model(str(folder))
    ours = load_sae(folder)
    x = torch.randn(500, 24)
    return ours.hook == "blocks.1.hook_mlp_out" and _compare(f"SAELens -> ours {options or ''}", ours, lens, x)


def main() -> int:
    try:
        import sae_lens
    except ImportError:
        print("sae-lens is not importable in this interpreter; run this check in one that has it")
        return 2
    print(f"sae-lens {sae_lens.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        results = [ours_in_saelens(root / "ours"),
                   saelens_in_ours(root / "lens"),
                   saelens_in_ours(root / "rescaled", rescale_acts_by_decoder_norm=True),
                   saelens_in_ours(root / "no_bdec", apply_b_dec_to_input=False)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
