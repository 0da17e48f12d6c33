"""The Features domain (issue 33): neurons and SAEs measured on held-out text, checked against the
model's own hooks; feature edits as session state; SAEs trained, saved beside the model and reopened;
every bad request named."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gptcore import sae_edit
from explorer.session.core import Session
from explorer.session.features.domain import FeaturesError
from explorer.session.features.store import CorpusError, corpus_ids

pytestmark = pytest.mark.usefixtures("single_torch_thread")
TEXT = ("the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat and "
        "a bird sings in the tall tree near the river bank every morning before the sun rises ") * 40


@pytest.fixture
def session(tmp_path):
    s = Session.tiny(block_size=64)
    (tmp_path / "corpus.txt").write_text(TEXT, encoding="utf-8")
    return s


def _hook_acts(session, ids: torch.Tensor, hook: str) -> torch.Tensor:
    seen = []
    with torch.no_grad(), session.model.hooks([(hook, lambda x, _hp: seen.append(x.detach()) or x)]):
        session.model(ids, logits=None)
    return torch.cat([x.reshape(-1, x.shape[-1]) for x in seen])


def test_neuron_statistics_equal_the_models_own_hook_on_the_held_out_text(session, tmp_path):
    path = str(tmp_path / "corpus.txt")
    table = session.features.use("neurons", 1, "mlp", corpus="file", path=path)
    _train, held, _name = corpus_ids(session, "file", path)
    acts = _hook_acts(session, held, "blocks.1.mlp.hook_post")  # (N, d_mlp): the oracle
    assert table.tokens == acts.shape[0] and len(table.ids) == session.config.d_mlp
    np.testing.assert_allclose(table.density, (acts > 0).float().mean(0).numpy(), atol=1e-6)
    np.testing.assert_allclose(table.max_act, acts.max(0).values.clamp(min=0).numpy(), rtol=1e-5, atol=1e-6)
    feature = int(np.argmax(table.max_act))
    detail = session.features.detail(feature)
    assert max(a.max() for _t, a in detail.contexts) == pytest.approx(table.max_act[feature], rel=1e-5)
    assert detail.hist_counts.sum() == int((acts[:, feature] > 0).sum())
    # what the neuron writes, through c_proj and the unembedding (final LN's gain), is its top promoted logit
    unit = torch.zeros(1, session.config.d_mlp)
    unit[0, feature] = 1
    with torch.no_grad():
        write = session.model.blocks[1].mlp.c_proj(unit) - session.model.blocks[1].mlp.c_proj.bias
        logits = session.model.unembed(write * session.model.ln_final.weight)[0]
    assert detail.promoted[0][1] == pytest.approx(float(logits.max()), rel=1e-4)
    assert table.logit_effect[feature] == pytest.approx(float(logits.max()), rel=1e-4)


def test_the_prompts_features_are_the_hooks_values_per_token(session, tmp_path):
    session.features.use("neurons", 0, "mlp", corpus="file", path=str(tmp_path / "corpus.txt"))
    result = session.features.prompt("the lazy dog sleeps", 5)
    ids = torch.tensor([session.encode("the lazy dog sleeps")])
    acts = _hook_acts(session, ids, "blocks.0.mlp.hook_post")
    np.testing.assert_allclose(result.selected_acts, acts[:, 5].numpy(), rtol=1e-5, atol=1e-6)
    assert list(result.top_ids[0]) == list(acts[0].topk(result.top_ids.shape[1]).indices.numpy())


def test_a_feature_edit_is_session_state_announced_and_reset(session, tmp_path):
    session.features.use("neurons", 1, "mlp", corpus="file", path=str(tmp_path / "corpus.txt"))
    events = []
    session.events.subscribe(events.append)
    ids = torch.tensor([session.encode("the quick brown fox")])
    with torch.no_grad():
        clean = session.model(ids).clone()
        from gptcore import neuron_dictionary

        with sae_edit(session.model, neuron_dictionary(session.model, 1), {7: 3.0}):
            want = session.model(ids).clone()  # the oracle: gptcore's own edit, for one block
    state = session.features.edit({7: 3.0})
    assert state.text() == "feature 7 → 3" and state.active
    assert type(events[-1]).__name__ == "AblationChanged" and events[-1].after.features == ((7, 3.0),)
    with torch.no_grad():
        torch.testing.assert_close(session.model(ids), want)  # every panel's forward now sees the edit
    session.interp.clear_ablation()  # the status bar's Reset
    assert not session.interp.ablation.active
    with torch.no_grad():
        torch.testing.assert_close(session.model(ids), clean)  # no hook left behind


def test_an_sae_is_trained_saved_beside_the_model_and_reopened(session, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    path = str(tmp_path / "corpus.txt")
    seen = []
    table = session.features.train(1, "resid", width=64, k=4, tokens=16_384, corpus="file", path=path,
                                   progress=lambda d, t, m: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1]  # progress reached its end
    assert table.source.kind == "sae" and table.source.width == 64 and table.source.k == 4
    assert table.metrics["l0"] == pytest.approx(4.0) and 0 < table.metrics["explained_variance"] <= 1
    folder = table.source.folder
    assert (tmp_path / "data").exists() and folder.startswith(str(tmp_path / "data"))
    reopened = session.features.use("sae", 1, "resid", corpus="file", path=path)
    assert reopened.source.folder == folder
    np.testing.assert_allclose(reopened.density, table.density)


def test_bad_requests_are_named_with_their_fix(session, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with pytest.raises(FeaturesError, match="press Train SAE"):
        session.features.use("sae", 0, "mlp", corpus="file", path=str(tmp_path / "corpus.txt"))
    with pytest.raises(FeaturesError, match="layers 0..1"):
        session.features.use("neurons", 5, "mlp")
    (tmp_path / "short.txt").write_text("too short", encoding="utf-8")
    with pytest.raises(CorpusError, match="too short"):
        session.features.use("neurons", 0, "mlp", corpus="file", path=str(tmp_path / "short.txt"))
    with pytest.raises(CorpusError, match="not a training run"):
        session.features.use("neurons", 0, "mlp", corpus="run")
    with pytest.raises(FeaturesError, match="choose Neurons or an SAE first"):
        session.features.detail(0)


def _char_run(root, steps=(0, 10, 20)):
    """A run folder (gptcore's writers, no training) of a 5-character model whose corpus is a text file
    in those characters, so 'the run's own data' can be read back."""
    import json

    from gptcore.model.config import GPTConfig
    from gptcore.model.gpt import GPT
    from gptcore.training.run import RunFolder
    from gptcore.training.trace import TraceWriter

    text = root.parent / "corpus.txt"
    text.write_text(("abc cab\nba ac cba\n" * 400), encoding="utf-8")
    folder = RunFolder(root)
    config = GPTConfig(vocab_size=5, block_size=32, n_layer=1, n_head=2, n_embd=16)
    folder.start({"schemes": ["gpt2"], "model_config": config.to_dict(), "train_config": {"max_iters": steps[-1]},
                  "corpus": {"name": "corpus.txt", "source": str(text)},
                  "tokenizer": {"kind": "char", "vocab": "char_vocab.json"}}, resume=False)
    (root / "char_vocab.json").write_text(json.dumps({"format": "gptcore-char-vocab-1", "chars": list("\n abc")}))
    with TraceWriter(folder.trace) as w:
        w.write("start", run="x", schemes=["gpt2"], step=0, max_iters=steps[-1], resumed=False, world_size=1)
        for step in steps:
            model = GPT(config, init="gpt2", seed=step)  # other weights at every kept step
            w.write("checkpoint", scheme="gpt2", step=step, latest="ckpt.pt",
                    path=folder.relative(folder.save_step_weights(model, "gpt2", step)))
    return folder


def test_features_over_training_walk_back_aligned_and_the_scrubbed_step_reopens_its_own_sae(tmp_path):
    from gptcore import load_sae

    root = tmp_path / "run"
    _char_run(root)
    session = Session.tiny()
    follower = session.training.open(root)
    session.training.show_step(follower, "gpt2", 20)
    trained = session.features.train(0, "resid", width=32, k=4, tokens=8192, corpus="run")
    over = session.features.over_training(trained.source.folder, tokens=8192 * 5)
    assert list(over.steps) == [0, 10, 20] and over.density.shape == (3, 32) and over.max_act.shape == (3, 32)
    saved = sorted(p.name for p in (root / "sae").iterdir() if p.is_dir())
    assert saved == [f"gpt2-step{s:06d}-L0-resid-w32-k4" for s in (0, 10, 20)]
    last, before = (load_sae(root / "sae" / saved[i]) for i in (2, 1))
    aligned = float((last.W_dec * before.W_dec).sum(1).mean().detach())
    assert aligned > 0.5  # warm-started from the next step: feature i is still feature i
    assert last.metadata["lineage"] == before.metadata["lineage"] == trained.source.lineage
    alive = over.max_act[-1] > 0
    assert np.all((over.formed >= 0) == alive) and set(over.formed[alive]) <= {0, 10, 20}
    assert session.features.over_training_of(0, "resid") is over and session.features.over_training_of(0, "mlp") is None
    np.testing.assert_allclose(over.density[2], trained.density, atol=1e-6)  # the table's own sample, at its step
    session.training.show_step(follower, "gpt2", 10)  # the Train panel's slider: that step's own SAE opens
    table = session.features.use("sae", 0, "resid", corpus="run")
    assert table.source.folder.endswith("gpt2-step000010-L0-resid-w32-k4")
    np.testing.assert_allclose(table.density, over.density[1], atol=1e-6)  # the walk measured that very SAE
