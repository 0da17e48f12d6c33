"""The session's residual domain: residual-stream norms and gradient flow of freshly initialised
models (gptcore.interp.probes.residual / gradients), and the loaded model's own curve. No Qt here.

Takes the session core explicitly (`ResidualDomain(core)`, made by `Session`; callers reach it as
`session.residual`: `probe_config`, `norms`, `model_curve`, `gradients`): the probes build
their own throw-away model per request (re-initialised per scheme and seed), so only reading the
core's config and measuring the loaded model's own curve need the core's lock.
"""
from __future__ import annotations

from typing import Callable

from gptcore.model.config import GPTConfig

from explorer.session.residual.results import GradientResult, ReferenceCurve, ResidualResult

ProgressFn = Callable[[int, int, str], None]


class ResidualDomain:
    def __init__(self, core):
        self.core = core

    def probe_config(self, overrides: dict | None = None) -> GPTConfig:
        """The current model's config with `overrides` applied (a full config dict works too)."""
        base = self.core.model.config.to_dict() if self.core.model is not None else GPTConfig().to_dict()
        return GPTConfig.from_dict({**base, **(overrides or {})})

    def norms(self, config: dict | None = None, schemes=None, seeds=(0, 1, 2), batch: int = 4,
                       length: int = 64, metric: str = "l2", tokens=None, progress: ProgressFn | None = None,
                       cancel=None, with_model: bool = True) -> ResidualResult:
        """Residual norm per layer boundary for each scheme (mean and spread over `seeds`),
        plus the loaded model's own curve on the same prompts when it is trained."""
        import time

        from gptcore.model.init import INIT_SCHEMES
        from gptcore.interp.probes.residual import residual_norms

        cfg = self.probe_config(config)
        started = time.perf_counter()
        curves = residual_norms(cfg, schemes=schemes or INIT_SCHEMES, seeds=seeds, batch=batch, length=length,
                                metric=metric, tokens=tokens, device=self.core.device, progress=progress,
                                cancel=cancel)
        elapsed = time.perf_counter() - started
        ref = self.model_curve(batch, length, curves.seeds[0], metric, tokens) if with_model else None
        return ResidualResult(curves=curves, reference=None if ref is None else ref.y,
                              reference_name="" if ref is None else ref.name,
                              version=self.core.version if ref is None else ref.version, elapsed_s=elapsed)

    def model_curve(self, batch: int = 4, length: int = 64, seed: int = 0, metric: str = "l2",
                             tokens=None) -> ReferenceCurve | None:
        """The loaded model's own norm curve on the sweep's prompts (seed's random ids or
        `tokens`); None unless a trained model is loaded (random weights are the sweep's job)."""
        from gptcore.interp.probes.residual import boundary_axis, model_residual_norms

        with self.core.lock:
            model, info, version = self.core.model, self.core.info, self.core.version
            if model is None or info.status_word == "untrained":
                return None
            y = model_residual_norms(model, tokens=tokens, batch=batch, length=length, seed=seed, metric=metric)
        x, _labels = boundary_axis(model.config.n_layer)
        return ReferenceCurve(x=x, y=y, name=info.name, version=version)

    def gradients(self, config: dict | None = None, schemes=None, seeds=(0, 1, 2), batch: int = 4,
                      length: int = 64, quantity: str = "params", tokens=None, progress: ProgressFn | None = None,
                      cancel=None) -> GradientResult:
        """Per-block gradient norm of the LM loss on random targets, for each scheme."""
        import time

        from gptcore.model.init import INIT_SCHEMES
        from gptcore.interp.probes.gradients import gradient_flow

        cfg = self.probe_config(config)
        started = time.perf_counter()
        curves = gradient_flow(cfg, schemes=schemes or INIT_SCHEMES, seeds=seeds, batch=batch, length=length,
                               quantity=quantity, tokens=tokens, device=self.core.device, progress=progress,
                               cancel=cancel)
        return GradientResult(curves=curves, version=self.core.version, elapsed_s=time.perf_counter() - started)
