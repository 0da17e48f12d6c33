"""Benches and cross-checks: programs that measure or verify the library, kept apart from it.

Nothing in gptcore imports this package (only the `python -m gptcore.bench` entry does, and the
tests); these modules may pull heavy references the library never needs at run time
(transformers' own models, TransformerLens in another interpreter, nanoGPT's model.py).

- `hf_compare`  — `python -m gptcore.bench`: forward+capture, decode, load, recount, patching and
  a SmolLM2-shaped Llama against Hugging Face transformers (`decode`, `patching`, `smollm2` hold three
  parts; `decode` also the first token's CUDA graph capture and the app's streamed path, `--decode`).
- `tl_check`    — `python -m gptcore.benches.tl_check`: DLA, patching and census against
  TransformerLens 4.x (run in an interpreter that has it); its random-GPT-2 builder is also the
  tests' HF oracle.
- `training`    — `python -m gptcore.bench --train [--device cuda]`: our Trainer against nanoGPT's
  model.py and train.py's loop (`nanogpt_loop`): speed, FLOP/s or MFU, and val loss, on the CPU
  recipe or GPT-2 124M on CUDA (`training_recipes`).
- `sae`         — `python -m gptcore.bench --sae`: the SAE training step against sparsify's
  (`sae_speed`), a char model's SAE and its quality bars, the fp16 disk cache.
- `sae_lens_check` — `python -m gptcore.benches.sae_lens_check`: our SAE files opened by SAELens and
  SAELens's by ours (run in an interpreter that has sae-lens).
- `circuits`    — `python -m gptcore.bench --circuits`: a char model's transcoders and their quality bars,
  the transcoder training step against autograd, the attribution graph's time and memory at the
  issue's size against one autograd backward per batch of targets.
- `circuit_tracer_check` — `python -m gptcore.benches.circuit_tracer_check`: our transcoder files,
  graphs, pruning and graph JSON against circuit-tracer itself (run in an interpreter that has it).
- `probe_cost`  — `python -m gptcore.benches.probe_cost`: what the training probes cost.
- `timing`      — interleaved medians and the machine's name, shared by every bench.
"""
