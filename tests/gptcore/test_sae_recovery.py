"""`fit_sae` with its defaults finds known features (issue 33's quality bar on synthetic data):
512 unit directions in 64 dimensions, each row the sum of 4 of them with random magnitudes; the
SAE (width 512, k 4) must find them (mean over the true directions of the best |cos| with a
decoder row >= 0.9) and explain >= 80 % of the variance of rows it never trained on."""
import pytest
import torch

from gptcore import fit_sae


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sparse_rows(n, directions, active, gen):
    n_feat = directions.shape[0]
    which = torch.rand(n, n_feat, generator=gen).topk(active, dim=1).indices  # (n, active), no repeats
    size = 0.5 + torch.rand(n, active, generator=gen)  # (n, active)
    return (size[:, :, None] * directions[which]).sum(1)  # (n, d)


def test_fit_sae_recovers_512_known_directions_in_64_dimensions():
    gen = torch.Generator().manual_seed(1)
    directions = torch.randn(512, 64, generator=gen)
    directions /= directions.norm(dim=1, keepdim=True)
    train = sparse_rows(200_000, directions, 4, gen)
    held_out = sparse_rows(20_000, directions, 4, gen)
    sae = fit_sae(train, width=512, k=4, tokens=1_000_000, seed=0)
    with torch.no_grad():
        unit = sae.W_dec / sae.W_dec.norm(dim=1, keepdim=True)
        best = (directions @ unit.T).abs().max(1).values  # (512,)
        x_hat = sae(held_out)
    ev = 1 - float((held_out - x_hat).pow(2).sum() / (held_out - held_out.mean(0)).pow(2).sum())
    assert float(best.mean()) >= 0.9, f"mean best |cos| {float(best.mean()):.3f}"
    assert ev >= 0.8, f"explained variance {ev:.3f}"
