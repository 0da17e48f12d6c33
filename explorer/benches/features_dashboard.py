"""Is a feature's dashboard quick to show at GPT-2 small sizes? (issue 39)

    python -m explorer.benches.features_dashboard [--width 24576] [--k 32] [--selections 8]

A GPT-2-small-shaped model (random weights: 12 layers, 768 wide, 50,257 tokens) and a TopK SAE of
`--width` latents on layer 6's residual stream (random weights, saved and reopened the way the panel
opens one), measured on the built-in text's held-out tokens as the Features domain keeps them. Then per
selection, median over `--selections` features:
- column_dense_ms: the feature's activation on every held-out token from a dense tokens × width encode
  (what `detail` did before; the reference);
- column_ms: the same numbers from each token's top-k, encoded once per table (what it does now);
- topk_once_ms: that once-per-table encode, alone (the table's statistics pass keeps it, so no selection
  pays it);
- nearest_ms: the 10 nearest features by decoder cosine (one matrix-vector product);
- detail_ms, dashboard_ms: the two tasks a selection submits, whole (the dashboard: example groups,
  neighbours, logits histogram).
No Qt: runs wherever the session does. Prints the CPU and the ratios against the dense reference.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


def _ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - start)


def run(width: int, k: int, selections: int) -> dict:
    import numpy as np
    import torch

    from explorer.session import models
    from explorer.session.core import Session
    from explorer.session.features import dashboard, stats
    from explorer.session.features.store import sae_folder
    from gptcore import save_sae
    from gptcore.interp.sae.dictionary import SAE
    from gptcore.model.cpu import cpu_name

    session = Session(*models.tiny(0, n_layer=12, n_head=12, n_embd=768, block_size=1024))
    layer, hook = 6, "blocks.6.hook_resid_post"
    g = torch.Generator().manual_seed(0)
    sae = SAE(768, width, k, hook=hook)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(768, width, generator=g) / 768 ** 0.5)
        sae.W_dec.copy_(sae.W_enc.t() / sae.W_enc.t().norm(dim=1, keepdim=True))
    save_sae(sae, sae_folder(session.info, layer, "resid", width, k), model_name=session.info.name)
    started = time.perf_counter()
    table = session.features.use("sae", layer, "resid")
    measure_s = time.perf_counter() - started
    ev, dictionary = session.features._eval, session.features._dictionary
    features = [int(f) for f in np.argsort(-table.max_act)[:selections]]
    assert ev["topk"][0] is dictionary  # kept by the table's pass
    topk_once = _ms(lambda: dashboard._topk_of(dictionary, {"rows": ev["rows"]}))  # the same encode, afresh
    rows = {name: [] for name in ("column_dense_ms", "column_ms", "nearest_ms", "detail_ms", "dashboard_ms")}
    matrix = dashboard.decoder(session.model, dictionary, "sae", layer)
    norms = dashboard._norms_of(matrix, dictionary, ev)
    for f in features:
        rows["column_dense_ms"].append(_ms(lambda: stats.dense_acts(dictionary, ev["rows"])[:, f].numpy()))
        rows["column_ms"].append(_ms(lambda: dashboard.feature_column(dictionary, ev, f)))
        rows["nearest_ms"].append(_ms(lambda: dashboard.nearest(matrix, norms, f)))
        rows["detail_ms"].append(_ms(lambda: session.features.detail(f)))
        rows["dashboard_ms"].append(_ms(lambda: session.features.dashboard(f)))
    out = {name: round(statistics.median(v), 2) for name, v in rows.items()}
    out.update(cpu=cpu_name(), threads=torch.get_num_threads(), width=width, k=k, held_out_tokens=table.tokens,
               measure_table_s=round(measure_s, 1), topk_once_ms=round(topk_once, 1),
               column_speedup=round(out["column_dense_ms"] / max(out["column_ms"], 1e-6), 1),
               load_average=os.getloadavg()[0])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m explorer.benches.features_dashboard", description=__doc__.split("\n")[0])
    p.add_argument("--width", type=int, default=24576)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--selections", type=int, default=8)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as home:
        os.environ["XDG_DATA_HOME"] = home  # the SAE is saved here, never in the user's folder
        out = run(args.width, args.k, args.selections)
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key:>18}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
