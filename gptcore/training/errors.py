"""What can stop a training run, as exceptions the command line turns into one clear line.
(Bad settings are TrainConfigError, bad data DataError: both ValueErrors, raised before a run.)"""
from __future__ import annotations


class TrainingError(RuntimeError):
    """Training cannot go on; the message says at which step and what to do."""


class NonFiniteLoss(TrainingError):
    """The loss (or the gradient norm) of step `step` is NaN or infinite. The weights and the
    optimizer are left as they were before the step, so the last checkpoint is still good."""

    def __init__(self, step: int, loss: float, what: str = "loss"):
        super().__init__(
            f"step {step}: the {what} is {loss} (not finite); the weights are kept from step {step - 1}. "
            f"Lower learning_rate, raise warmup_iters, keep grad_clip on, or train in float32")
        self.step = step
        self.loss = loss
        self.what = what


class CheckpointError(TrainingError):
    """A checkpoint could not be written or resumed from; the message says which file and why."""
