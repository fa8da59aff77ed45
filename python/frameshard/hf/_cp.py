"""Context parallelism (CP) for the language model of a transformers Qwen-VL or GLM-4V model.

    cp = frameshard.hf.context_parallel(model, group, split="load_balanced")
    frameshard.hf.enable(model, group, cfg)      # optional: shard the vision tower's frames too
    out = cp(**inputs, labels=inputs["input_ids"])   # every rank passes the WHOLE batch
    out.loss.backward()                          # this rank's share: sum over ranks = the mean
    for p in model.parameters():                 # then SUM-all-reduce the gradients over group
        dist.all_reduce(p.grad, group=group)
    cp.remove()                                  # the model as it was

What runs where. The model's own forward runs unchanged up to its language model: the token
embeddings, the vision features (sharded by `hf.enable` or not; all-gathered, so every rank holds
every visual row), the placeholder merge and the multimodal rotary position ids (mRoPE,
[3 or 4, B, S]) are computed by transformers on the whole sequence. The language model's forward
(an instance attribute; the class is untouched) then pads the sequence at its end to a multiple of
2 x CP (load_balanced) or CP (contiguous) and keeps this rank's rows: chunks r and 2CP-1-r of 2CP
(load_balanced) or chunk r of CP (contiguous), of the embeddings, of the position ids (split on
their last dimension) and, for Qwen3-VL, of the DeepStack rows (the visual rows at this rank's
positions, in order). Its decoder layers run on those rows only:

- full attention: the text config's attention implementation becomes "frameshard_cp" (registered
  with transformers' AttentionInterface; the vision config is a separate object and keeps its
  own, so the vision tower's attention is untouched). It all-gathers K and V (one differentiable
  frameshard.all_gather_rows; backward: the reduce-scatter of dK, dV) and runs SDPA with the
  causal mask at this rank's global positions (CPU and GPU);
- Qwen3.5's linear-attention layers (transformers' GatedDeltaNet, a recurrence over the sequence):
  divided, each rank runs its own rows (_cp_linear): the causal conv's K-1 rows before each run of
  contiguous rows are all-gathered, and the recurrence, linear in its initial state S, gives per
  run (one call of transformers' rule) its final state A S + F and its outputs O(0) + Q S; the
  ranks all-gather the runs' [F | A], scan them in sequence order and add Q S to O(0).

Outputs, `outputs="local"` (default): the logits are this rank's rows ([B, local_length, vocab];
`cp.positions(S)` are their global positions, those >= S padding). `cp.loss(logits, labels)`
shifts the WHOLE labels first, then splits them: sum of this rank's token losses / the global
count of labelled tokens, so the ranks' losses sum to the unsharded mean (cross entropy in
float32 or wider, as transformers'). `outputs="whole"`: the language model's last hidden state is
all-gathered back into the whole sequence (one all-gather of [S, B, hidden] per forward; backward:
the reduce-scatter), so the head, the logits and any loss a trainer computes from them are the
unsharded model's on every rank. Each rank's loss is then the whole loss, and the gather's
backward sums the CP ranks' equal gradients of each row: the ranks' gradients (the head's, run
on every rank, too) sum to cp x the unsharded model's, which the usual average over the dp x cp
ranks (DDP, FSDP2: grad_scale cp) turns into the replicas' mean; under another reduction the loss
takes the factor grad_scale / cp (`cp.loss` applies it). The decoder layers, the attention and the
tower still run on 1/cp of the rows; the head runs on all of them on every rank, so a trainer's
loss, metrics and evaluation are unchanged (integrations/_cp_trainer.py).

Collective: every forward and backward of the model, over `group`; every rank must pass the same
whole batch (one small agreement exchange per forward checks the shapes: a disagreement raises
FrameshardError on every rank). Collectives run with `timeout`, so a rank that fails or never
calls makes the others raise instead of hanging. Not supported (FrameshardError): a padding
attention_mask (pass None or all ones; right-pad with labels -100), a KV cache (generation),
sliding-window attention, output_attentions.

The modules, top-down: this one installs and orchestrates; _cp_owner (the merge after the split,
with hf.enable's gather "owner") and _cp_linear (the linear attention, divided) are its steps;
_cp_layout (the split and one forward's layout) is what the three share and imports none of them.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import torch
import torch.distributed as dist

from .._C import FrameshardError
from .._groups import Timeout, resolve
from . import _compat, _cp_attention, _cp_layout, _cp_linear, _cp_owner, _family, _grad_reduction, _patches

# The attention implementation's name: registered with transformers' AttentionInterface and set
# as the text config's `_attn_implementation`.
ATTENTION_IMPLEMENTATION = "frameshard_cp"
# The keyword that carries the forward's layout (a `_cp_layout.Forward`) from the language
# model's forward through the decoder layers' **kwargs down to the attention calls. Equal to
# ATTENTION_IMPLEMENTATION by history only: neither name depends on the other.
FORWARD_KWARG = "frameshard_cp"
OWNER = "cp"  # the patch registry's owner of the language model's patches
OUTPUTS = ("local", "whole")


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """The "frameshard_cp" attention implementation: query [B, H, local, D], key and value
    [B, Hkv, local, D] -> ([B, local, H, D], None). Collective (one all-gather of K and V)."""
    fwd: _cp_layout.Forward | None = kwargs.get(FORWARD_KWARG)
    if fwd is None:
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected the attention to run inside the language "
            "model's context-parallel forward, got a call without it (from %s)" % type(module).__name__
        )
    if attention_mask is not None:
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected no attention mask in the CP attention (it "
            "builds the causal mask at global positions), got a %s" % type(attention_mask).__name__
        )
    fwd.calls.append(type(module).__name__)
    hkv = key.shape[1]
    kv = torch.cat([key, value], dim=1).permute(2, 0, 1, 3)  # [local, B, 2 Hkv, D]
    kv = fwd.gather(kv).permute(1, 2, 0, 3)  # [B, 2 Hkv, padded, D]
    dropout = dropout if module.training else 0.0
    out = _cp_attention.flash_runs(query, kv, fwd, scaling, dropout)  # CPU: no mask held
    if out is None:
        key, value = kv[:, :hkv], kv[:, hkv:]
        groups = query.shape[1] // hkv
        if groups > 1:  # grouped-query attention: each K/V head serves `groups` query heads in turn
            key = key.repeat_interleave(groups, dim=1)
            value = value.repeat_interleave(groups, dim=1)
        # The keys stay in gathered (rank-major) order: the mask, built once per forward from the
        # gathered rows' global positions, is what makes it causal.
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=fwd.mask, dropout_p=dropout, scale=scaling
        )
    return out.transpose(1, 2).contiguous(), None


@dataclasses.dataclass
class _State:
    """The CP install on a language model (the patch registry's state under OWNER)."""

    group: dist.ProcessGroup
    split: str
    timeout: Timeout
    linear: list  # the patched linear-attention modules (Qwen3.5)
    outputs: str = "local"  # OUTPUTS: this rank's rows out, or the whole sequence (all-gathered)
    model: Any = None  # what context_parallel was given (its DDP / FSDP2 decide the gradient scale)
    grad_reduction: str = "auto"
    last: _cp_layout.Forward | None = None  # the latest forward's layout (its attention calls)
    ddp: Any = None  # a DistributedDataParallel seen running around the latest forward

    def grad_scale(self) -> float:
        """The factor on a rank's share of the loss for the gradient reduction in force."""
        return _grad_reduction.loss_scale(self.model, self.group, self.grad_reduction, self.ddp)

    def layout(self, seq_len: int, device: torch.device, agree: torch.Tensor) -> _cp_layout.Forward:
        """This forward's layout, after checking that every rank passes the same shapes (one
        small all-gather; a disagreement raises the same error on every rank)."""
        return _cp_layout.forward_layout(self.group, self.split, self.timeout, seq_len, device, agree)


def _deepstack(fwd: _cp_layout.Forward, pad: int, visual_pos_masks: torch.Tensor, embeds: list) -> dict:
    """This rank's DeepStack inputs: its rows of the visual mask and, of every DeepStack
    feature, the rows of the visual tokens at its positions (in their order)."""
    mask = _cp_layout.pad(visual_pos_masks.bool(), pad, dim=1, value=False)
    index = (mask.flatten().cumsum(0) - 1).view(mask.shape)  # visual row of each position
    local = mask[:, fwd.positions]
    rows = index[:, fwd.positions][local]
    return {"visual_pos_masks": local, "deepstack_visual_embeds": [d[rows] for d in embeds]}


def _lm_forward(
    lm: torch.nn.Module,
    input_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    cache: Any = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    visual_pos_masks: torch.Tensor | None = None,
    deepstack_visual_embeds: list | None = None,
    **kwargs: Any,
) -> Any:
    """The language model's forward while CP is installed (bound to the instance): the whole
    sequence in, this rank's rows through the decoder layers, this rank's rows out."""
    state: _State = _patches.state(lm, OWNER)
    cache = cache if cache is not None else kwargs.pop("past_key_values", None)  # its name before 5.24
    kwargs.pop("past_key_values", None)
    _cp_layout.refuse_unsupported(attention_mask, cache, kwargs)
    if inputs_embeds is None:
        inputs_embeds = lm.get_input_embeddings()(input_ids)
    local: _cp_layout.Local | None = kwargs.pop(_cp_layout.LOCAL, None)
    if local is not None:  # gather owner (_cp_owner): this rank's rows, merged and cut already
        fwd, embeds, extra = local.layout, inputs_embeds, local.extra
    else:
        b, s, h = inputs_embeds.shape
        agree = torch.tensor([b, s, h], dtype=torch.int64)
        fwd = state.layout(s, inputs_embeds.device, agree)
        pad = int(fwd.order.numel()) - s
        embeds = _cp_layout.pad(inputs_embeds, pad, dim=1)[:, fwd.positions]
        position_ids = _cp_layout.local_position_ids(position_ids, fwd, b, s, inputs_embeds.device)
        extra = {}
        if deepstack_visual_embeds is not None:
            extra = _deepstack(fwd, pad, visual_pos_masks, deepstack_visual_embeds)
    out = type(lm).forward(
        lm,
        inputs_embeds=embeds,
        position_ids=position_ids,
        attention_mask=None,
        use_cache=False,
        **{_compat.cache_name(type(lm).forward, ("cache", "past_key_values")): None},
        **extra,
        **kwargs,
        **{FORWARD_KWARG: fwd},
    )
    state.last = fwd
    state.ddp = _grad_reduction.active_ddp(lm)
    if state.outputs == "whole":
        out.last_hidden_state = fwd.whole(out.last_hidden_state)
    return out


def _linear_forward(module: torch.nn.Module, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """A linear-attention layer's forward under CP (Qwen3.5's gated delta net, a recurrence over
    the sequence): run on this rank's rows only, the conv halos and the recurrence's segment
    states exchanged (_cp_linear)."""
    fwd: _cp_layout.Forward | None = kwargs.pop(FORWARD_KWARG, None)
    if fwd is None:
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected the linear attention to run inside the "
            "language model's context-parallel forward, got a call without it"
        )
    return _cp_linear.forward(module, fwd, hidden_states, *args, **kwargs)


class ContextParallel:
    """The handle `context_parallel` returns: the split, this rank's positions, the loss."""

    def __init__(self, model: Any, lm: torch.nn.Module, state: _State) -> None:
        self.model, self.language_model, self._state = model, lm, state
        self.group, self.split, self.outputs = state.group, state.split, state.outputs
        self.cp_size, self.rank = state.group.size(), state.group.rank()
        self.grad_reduction = state.grad_reduction

    @property
    def grad_scale(self) -> float:
        """The factor `loss` applies to this rank's share for the gradient reduction in force
        (`grad_reduction`, read from the model's DDP / FSDP2 under "auto"): 1 for a SUM over the
        CP group, cp for FSDP2 / DDP averaging over the dp x cp ranks. Read at every `loss`, so a
        wrapper applied after `context_parallel` (fully_shard; a DDP whose forward ran the latest
        forward) or a divide factor set later counts. `loss / grad_scale` is the share, for logging."""
        return self._state.grad_scale()

    def positions(self, seq_len: int) -> torch.Tensor:
        """Global positions of this rank's rows (logits, hidden states) of a sequence of
        `seq_len`; those >= seq_len are end padding."""
        return _cp_layout.chunk_positions(seq_len, self.cp_size, self.rank, self.split)

    def shard(self, tensor: torch.Tensor, fill: Any = 0) -> torch.Tensor:
        """This rank's part of a whole-sequence tensor (the sequence on its last dimension),
        end-padded with `fill` as the model pads its input."""
        s = tensor.shape[-1]
        pad = _cp_layout.padded_length(s, self.cp_size, self.split) - s
        return _cp_layout.pad(tensor, pad, dim=tensor.dim() - 1, value=fill)[..., self.positions(s).to(tensor.device)]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
        """This rank's share of the next-token loss, times `grad_scale`: labels [B, S] (the whole
        batch's) are shifted, then split; sum of this rank's token losses / the global number of
        labelled tokens. The ranks' shares sum to the unsharded mean; with the scale, its
        backward under the gradient reduction in force gives the unsharded model's gradients.
        No communication. With `outputs="whole"`: the unsharded mean of the whole logits, times
        grad_scale / cp (1 under DDP or FSDP2 over the dp x cp ranks)."""
        shifted = torch.full_like(labels, ignore_index)
        shifted[:, :-1] = labels[:, 1:]
        whole = self.outputs == "whole"
        local = (shifted if whole else self.shard(shifted, fill=ignore_index)).to(logits.device)
        if tuple(logits.shape[:2]) != tuple(local.shape):
            raise FrameshardError(
                "frameshard.hf.context_parallel.loss: expected this rank's logits [%d, %d, vocab] "
                "for labels %s, got %s" % (local.shape[0], local.shape[1], tuple(labels.shape), tuple(logits.shape))
            )
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        total = torch.nn.functional.cross_entropy(
            wide.reshape(-1, wide.shape[-1]), local.reshape(-1), ignore_index=ignore_index, reduction="sum"
        )
        share = total / (shifted != ignore_index).sum().clamp(min=1).to(total.device)
        scale = self.grad_scale / self.cp_size if whole else self.grad_scale
        return share * scale if scale != 1.0 else share

    def __call__(self, labels: torch.Tensor | None = None, **inputs: Any) -> Any:
        """model(**inputs) (collective); with `labels` (the whole batch's), `.loss` is this
        rank's share (see `loss`)."""
        out = self.model(**inputs)
        if labels is not None:
            out.loss = self.loss(out.logits, labels)
        return out

    @property
    def attention_calls(self) -> list:
        """The module classes whose attention ran through "frameshard_cp" in the latest forward."""
        return list(self._state.last.calls) if self._state.last is not None else []

    def remove(self) -> bool:
        """Restores the language model (forward, attention implementation, linear attention)."""
        return remove(self.language_model)


def _check_arguments(grad_reduction: str, split: str, outputs: str) -> None:
    """context_parallel's refusals before it touches the model."""
    _compat.check_transformers("context_parallel")
    missing = _compat.missing_cp_features()
    if missing:
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected transformers with %s, got transformers %s without it"
            % (", ".join(missing), _compat.transformers_version())
        )
    if grad_reduction not in _grad_reduction.MODES:
        raise FrameshardError(
            "frameshard.hf.context_parallel: grad_reduction: expected one of %s, got %r"
            % (", ".join(_grad_reduction.MODES), grad_reduction)
        )
    if outputs not in OUTPUTS:
        raise FrameshardError(
            "frameshard.hf.context_parallel: outputs: expected one of %s, got %r" % (", ".join(OUTPUTS), outputs)
        )
    if split not in _cp_layout.SPLITS:
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected split 'load_balanced' or 'contiguous', got %r" % (split,)
        )


def context_parallel(
    model: Any,
    group: Any = None,
    split: str = "load_balanced",
    *,
    grad_reduction: str = "auto",
    outputs: str = "local",
    timeout: Timeout = None,
) -> ContextParallel:
    """Installs context parallelism over `group` (a ProcessGroup; a DeviceMesh: its "cp"
    dimension, or its only one; None: the default group) on the language model of `model` (see
    the module's docstring); returns its ContextParallel handle. Installing again replaces the
    group and split. Local: no communication until the model's next forward.

    `grad_reduction` says how the parameter gradients will be reduced, so that the handle's
    `loss` carries the scale that gives the unsharded model's gradients (`ContextParallel.grad_scale`):
    "auto" (default) reads it from the model's DistributedDataParallel (pass the DDP object as
    `model`) or FSDP2 modules, and means "sum" when there is none; "sum": a SUM all-reduce over
    the CP group (over dp x cp, divided by dp, with data parallelism); "mean": an average over
    the dp x cp ranks. A DDP or FSDP2 whose group misses this rank's CP peers raises at `loss`.

    `outputs`: "local" (this rank's rows of the last hidden state and logits) or "whole" (the
    whole sequence's on every rank, all-gathered after the last decoder layer; see the module's
    docstring)."""
    _check_arguments(grad_reduction, split, outputs)
    lm = _cp_layout.find_language_model(model)
    pg, _ = resolve(group, "hf.context_parallel")
    config = lm.config
    layer_types = getattr(config, "layer_types", None) or []
    if getattr(config, "use_sliding_window", False) or "sliding_attention" in layer_types:
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected full causal attention, got sliding-window "
            "layers (use_sliding_window / layer_types)"
        )
    from transformers import AttentionInterface  # noqa: PLC0415  (transformers is optional)

    AttentionInterface.register(ATTENTION_IMPLEMENTATION, _attention)
    linear_classes = _family.of_text(lm).linear_attention
    linear = [m for m in lm.modules() if any(c.__name__ in linear_classes for c in type(m).__mro__)]
    state = _State(
        group=pg,
        split=split,
        timeout=timeout,
        linear=linear,
        outputs=outputs,
        model=model,
        grad_reduction=grad_reduction,
    )
    patches = [
        (config, "_attn_implementation", ATTENTION_IMPLEMENTATION),
        (lm, "forward", types.MethodType(_lm_forward, lm)),
    ]
    patches += [(m, "forward", types.MethodType(_linear_forward, m)) for m in linear]
    _patches.install(lm, OWNER, state, patches)
    _cp_owner.install(model, lm, state)  # gather owner: the merge after the split, decided per forward
    return ContextParallel(model, lm, state)


def remove(model: Any) -> bool:
    """Uninstalls context_parallel from the model's language model; False if it was not there."""
    lm = _cp_layout.find_language_model(model, fn="remove")
    _cp_owner.remove(lm)  # its patch of the multimodal model's forward
    return _patches.remove(lm, OWNER)


def is_installed(model: Any) -> bool:
    """Whether context_parallel is installed on the model's language model."""
    return _patches.state(_cp_layout.find_language_model(model, fn="is_installed"), OWNER) is not None
