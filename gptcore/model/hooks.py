"""Hook points: identity modules whose names come from the module tree.

TransformerLens's idea: every activation worth looking at passes through a `HookPoint`,
so `model.hooks([(name, fn)])` can read or replace it without touching the model code.
A HookPoint with nothing attached is an identity call and costs nothing measurable.

This is also the one module that reads torch's own hook bookkeeping (its private dictionaries:
torch has no public way to ask whether a module has hooks, nor to set hooks aside):
`module_hooked` asks it for any module, `HookedModule.hooks_suspended` sets a model's hooks
aside for a block. Everyone else asks these two.
"""
from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Callable, Iterable, Iterator, Sequence, Union

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

# fn(tensor, hook) -> None (observe) or a tensor (replace the activation).
HookFn = Callable[[torch.Tensor, "HookPoint"], Union[torch.Tensor, None]]
NameFilter = Union[None, str, Sequence[str], Callable[[str], bool]]


# torch's per-module records of forward hooks, keyed by handle id (the last two: torch >= 2.0)
_TORCH_HOOK_RECORDS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


def module_hooked(module: nn.Module) -> bool:
    """True unless we can tell that no forward hook (the module's own or a global one) would see
    `module`'s output. A torch without these records counts as hooked (the safe answer: a fast
    path that skips `__call__` is then never taken)."""
    try:
        return bool(module._forward_hooks or module._forward_pre_hooks) or _global_hooks_attached()
    except AttributeError:
        return True


def _global_hooks_attached() -> bool:
    """Is a global forward (pre-)hook registered (torch.nn.modules.module.register_module_forward_hook)?
    True where torch lacks these records."""
    from torch.nn.modules import module as torch_module

    try:
        return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks)
    except AttributeError:
        return True


class HookPoint(nn.Module):
    """Identity; `name` is filled in from `named_modules()` by the root model."""

    def __init__(self):
        super().__init__()
        self.name: str = ""
        # Our own record of the forward hooks attached and not yet removed: torch offers no
        # public way to ask a module whether it has hooks. OrderedDict: handles hold it weakly.
        self._live_hooks: OrderedDict[int, RemovableHandle] = OrderedDict()

    @property
    def active(self) -> bool:
        """True when someone listens; lets attention skip materialising the pattern."""
        return bool(self._live_hooks)

    def register_forward_hook(self, hook, **kwargs) -> RemovableHandle:
        """torch's register_forward_hook (same arguments), recorded so `active` knows; also
        a hook attached with torch's own call, not `add_hook`, makes the point active."""
        return _TrackedHandle(super().register_forward_hook(hook, **kwargs), self._live_hooks)

    def add_hook(self, fn: HookFn) -> RemovableHandle:
        def call(module, _inputs, output):
            return fn(output, module)

        return self.register_forward_hook(call)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def _records(self) -> list:
        return [getattr(self, name) for name in _TORCH_HOOK_RECORDS if hasattr(self, name)] + [self._live_hooks]

    def _set_aside(self) -> list:
        """Take every hook off (kept, in order, for `_put_back`); the records are emptied in place, so
        the handles given out stay valid and a `remove()` meanwhile still finds its hook later."""
        kept = [OrderedDict(record) for record in self._records()]
        for record in self._records():
            record.clear()
        return kept

    def _put_back(self, kept: list) -> None:
        """The hooks `_set_aside` took, first and in their order; any added since (and not removed) after them."""
        for record, old in zip(self._records(), kept):
            added = OrderedDict(record)
            record.clear()
            record.update(old)
            record.update(added)


class _TrackedHandle(RemovableHandle):
    """torch's handle for a hook plus our record of it in `live`; remove() drops both."""

    def __init__(self, torch_handle: RemovableHandle, live: OrderedDict):
        super().__init__(live)  # our id; RemovableHandle.remove deletes it from `live`
        live[self.id] = torch_handle
        self.torch_handle = torch_handle

    def remove(self) -> None:
        self.torch_handle.remove()
        super().remove()


def _make_filter(names_filter: NameFilter) -> Callable[[str], bool]:
    if names_filter is None:
        return lambda name: True
    if isinstance(names_filter, str):
        return lambda name: name == names_filter
    if callable(names_filter):
        return names_filter
    wanted = set(names_filter)
    return lambda name: name in wanted


class HookedModule(nn.Module):
    """Root-module mixin: names hook points, attaches hooks for a block of code, caches."""

    def setup_hooks(self) -> None:
        self.hook_dict: dict[str, HookPoint] = {}
        for name, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = name
                self.hook_dict[name] = module

    @property
    def hook_names(self) -> list[str]:
        return list(self.hook_dict)

    def _check_names(self, names: NameFilter) -> None:
        """A typo in a hook name must be an error, not a silently empty cache."""
        if names is None or callable(names):
            return
        for name in [names] if isinstance(names, str) else names:
            if name not in self.hook_dict:
                raise KeyError(f"no hook point named {name!r}; see model.hook_names")

    @contextlib.contextmanager
    def hooks(self, fwd_hooks: Iterable[tuple[Union[str, Callable[[str], bool]], HookFn]] = ()) -> Iterator["HookedModule"]:
        """Attach hooks for the duration of a `with` block; always removes what it added,
        also when the block raises. A hook's name may be a string or a predicate."""
        handles = []
        try:
            for name, fn in fwd_hooks:
                if callable(name):
                    targets = [hp for n, hp in self.hook_dict.items() if name(n)]
                else:
                    self._check_names(name)
                    targets = [self.hook_dict[name]]
                handles.extend(hp.add_hook(fn) for hp in targets)
            yield self
        finally:
            for handle in handles:
                handle.remove()

    @contextlib.contextmanager
    def hooks_suspended(self) -> Iterator["HookedModule"]:
        """The model itself for the duration of a `with` block: every hook attached so far (an
        ablation, a feature edit held for a whole app) is set aside and put back afterwards, in its
        order, with its handles still valid. Hooks added inside the block (`hooks(...)`) see the
        plain model. Why: a measurement *of the model* (an SAE's training data, its metrics) must not
        read what an edit made of it. Not thread-safe: hold whatever lock guards the model's forwards,
        and remove no hook attached before the block from inside it (it would come back at the end)."""
        kept = [(hp, hp._set_aside()) for hp in self.hook_dict.values() if hp.active]
        try:
            yield self
        finally:
            for hp, hooks in kept:
                hp._put_back(hooks)

    def run_with_cache(self, *args, names_filter: NameFilter = None, device=None, **kwargs):
        """Run forward and return `(output, cache)`, cache: {hook name: detached tensor}.

        Only the hook points `names_filter` selects are stored (and, for attention, only
        then is the pattern materialised), so a view pays for what it shows and no more.
        """
        self._check_names(names_filter)
        keep = _make_filter(names_filter)
        cache: dict[str, torch.Tensor] = {}

        def store(tensor: torch.Tensor, hook: HookPoint):
            value = tensor.detach()
            cache[hook.name] = value.to(device) if device is not None else value

        chosen = [(name, store) for name in self.hook_dict if keep(name)]
        with self.hooks(chosen):
            output = self(*args, **kwargs)
        return output, cache



class HookWatch:
    """Answers "would any forward (pre-)hook run in `model`?": an active HookPoint, an ablation, a
    feature edit, a user's `register_forward_hook`, a global module hook.

    Why: a captured CUDA graph replays kernels, never Python, so a hook attached after (or before)
    the capture would silently not run; the decoder asks this before every token and takes the plain
    path while it says yes. Asked that often it must be cheap: it keeps the modules' hook dicts
    (torch mutates them in place, never replaces them) and tests them, ~15 us for GPT-2 small's 334
    modules. torch offers no public question for it, so a torch without these fields counts as hooked."""

    def __init__(self, model: nn.Module):
        try:
            self._dicts = [d for m in model.modules() for d in (m._forward_hooks, m._forward_pre_hooks)]
        except AttributeError:
            self._dicts = None

    def attached(self) -> bool:
        return self._dicts is None or _global_hooks_attached() or any(self._dicts)
