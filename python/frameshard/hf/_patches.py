"""One registry of the instance patches frameshard makes on modules it does not own, with one undo.

Every patch frameshard.hf makes -- a vision module's forward, the attention forwards of split
frames, a model's get_image_features, a language model's forward, its linear-attention layers'
forwards and its config's attention implementation -- is an attribute set on an INSTANCE (the
classes are untouched, as FSDP2 and Liger-Kernel patch models they do not own). `install` records
what each attribute was (an instance value or nothing) under an owner on the root module, with
the owner's state object; `remove` restores them in reverse order, so `hf.disable` and
`ContextParallel.remove` share one undo and leave nothing behind.

    _patches.install(visual, "vision", state, [(visual, "forward", new_forward)])
    _patches.state(visual, "vision")    # the state, or None when not installed
    _patches.remove(visual, "vision")   # True if it was installed
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

_REGISTRY = "_frameshard_patches"
_MISSING = object()


@dataclasses.dataclass
class _Record:
    state: Any
    undo: list  # (target, attribute, previous value or _MISSING, by_value), in patch order


def _records(root: Any) -> dict[str, _Record]:
    return root.__dict__.get(_REGISTRY, {})


def state(root: Any, owner: str) -> Any | None:
    """The state `install` stored for `owner` on `root`, or None."""
    record = _records(root).get(owner)
    return record.state if record is not None else None


def _set(target: Any, name: str, value: Any) -> tuple:
    """Sets one attribute; returns its undo entry. A property of the class (a transformers
    config's `_attn_implementation`) is set and restored through it, by value; anything else
    (a bound method, an nn.Module's forward) goes into the instance's __dict__ and is undone by
    deleting it, so that the class's attribute shows again."""
    if isinstance(getattr(type(target), name, None), property):
        entry = (target, name, getattr(target, name), True)
        setattr(target, name, value)
        return entry
    entry = (target, name, target.__dict__.get(name, _MISSING), False)
    object.__setattr__(target, name, value)  # past nn.Module.__setattr__: a plain attribute
    return entry


def wrapped(target: Any, name: str, make: Any) -> tuple[Any, str, Any]:
    """The patch (target, name, make(the current method)) that wraps a method of `target` (an
    instance), for `install`; the wrapper keeps the method's name and docstring."""
    original = getattr(target, name)
    return target, name, functools.wraps(original)(make(original))


def install(root: Any, owner: str, state: Any, patches: list[tuple[Any, str, Any]]) -> None:
    """Sets each (target, attribute, value), after undoing a previous install of `owner` on
    `root`; `state` is what `state(root, owner)` returns from now on."""
    remove(root, owner)
    record = _Record(state, [])
    root.__dict__.setdefault(_REGISTRY, {})[owner] = record
    add(root, owner, patches)


def add(root: Any, owner: str, patches: list[tuple[Any, str, Any]]) -> None:
    """More patches for an installed `owner` (undone with the rest by `remove`)."""
    record = _records(root)[owner]
    for target, name, value in patches:
        record.undo.append(_set(target, name, value))


def remove(root: Any, owner: str) -> bool:
    """Restores every attribute `owner` patched, last first; False if it was not installed."""
    records = _records(root)
    record = records.pop(owner, None)
    if record is None:
        return False
    for target, name, previous, by_value in reversed(record.undo):
        if by_value:
            setattr(target, name, previous)
        elif previous is _MISSING:
            target.__dict__.pop(name, None)
        else:
            object.__setattr__(target, name, previous)
    if not records:
        root.__dict__.pop(_REGISTRY, None)
    return True


def uninstall(root: Any, owner: str) -> Any | None:
    """`remove` of an owner whose state holds forward-hook handles in `.hooks` (the trainer
    integrations): the hooks removed, then the patches; the state, or None if not installed."""
    installed = state(root, owner)
    if installed is None:
        return None
    for handle in installed.hooks:
        handle.remove()
    remove(root, owner)
    return installed
