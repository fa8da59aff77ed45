"""Qwen3.5's linear attention (transformers' GatedDeltaNet) under context parallelism, divided:
each rank runs the layer on its own rows only (`_cp._linear_forward` calls `forward`; the
layout is `_cp_layout.Forward`).

The layer is per position except two steps over the sequence, which are exchanged exactly:

- the causal depthwise conv1d (kernel K) over the projected q/k/v: a run of contiguous rows
  (a "segment": load_balanced gives a rank chunks r and 2CP-1-r, two segments, one where they
  meet at rank CP-1; contiguous gives one) needs the K-1 conv inputs before it. Every rank sends
  the last min(length, K-1) conv-input rows of each of its segments (one differentiable
  all-gather, `frameshard.all_gather_rows`); a segment's halo is the K-1 positions before it
  (zeros before position 0). The layer's own conv function runs on [halo; segment] and the
  segment's rows are kept.
- the gated delta recurrence over the state S [B, H, dk, dv]. Over a segment it is linear in
  (initial state, values) jointly: the final state is A @ S0 + F (A [dk, dk] multiplies on the
  left, F [dk, dv]: the final state from a zero state) and the outputs are O(0) + Q @ S0 (Q
  [L, dk] per head). The value columns are independent, so ONE call of the layer's rule per
  segment gives all four: values [v | 0] (dv + dk columns), initial state [0 | I] -> outputs
  [O(0) | Q], final state [F | A]. The ranks all-gather [F | A] of every segment
  (differentiably: 2CP x B x H x dk x (dk + dv) floats), scan them in position order (the
  state entering segment j is A_{j-1} S_{j-1} + F_{j-1}, zero at position 0) and add Q @ S to
  O(0).

transformers' own functions do the work (the module of the layer's class:
torch_chunk_gated_delta_rule, whatever it resolves to -- FLA when installed --, and
causal_conv1d_forward (5.25) or causal_conv1d_fn; the layer's projections, norm and out_proj),
so its numerics are followed: the rule computes in float32 (also in a float64 model). Its inputs
are passed in float32 or wider (in a bfloat16 model: float32, so O(0) + Q @ S is added before
the one cast to the model's dtype). Differences to the unsharded layer are float32 roundings
(other chunk boundaries inside the rule, the scan's products).

A layer without the attributes this needs (another transformers release) falls back to the
gathered path: its input all-gathered, the layer run on the whole sequence on every rank, this
rank's rows kept. `processed(fwd)` lists the rows each call's recurrence ran on (the tests
check that they are this rank's rows, not the whole sequence).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import torch
from torch.nn.functional import softplus

from .._C import FrameshardError
from .._shard import all_gather_rows
from . import _compat
from ._cp_layout import Forward

_ATTRS = (
    "in_proj_qkv",
    "in_proj_z",
    "in_proj_b",
    "in_proj_a",
    "conv1d",
    "A_log",
    "dt_bias",
    "norm",
    "out_proj",
    "head_k_dim",
    "head_v_dim",
    "num_k_heads",
    "num_v_heads",
    "key_dim",
    "value_dim",
    "activation",
)
_RECORD = "frameshard_linear_rows"  # the attribute of the per-forward layout recording the rows
_PLANS = "frameshard_linear_plans"  # the attribute caching the segment plans (per kernel size)


@dataclasses.dataclass
class _Plan:
    """The segments of one forward's layout, the same on every rank."""

    own: list  # this rank's segments in local order: (position-order index, local offset, length)
    seg_counts: list  # segments per rank (the summaries' all-gather)
    order: list  # gathered summary row of each segment, in position order
    tail_counts: list  # conv-input rows each rank sends (the halos' all-gather)
    tail_local: torch.Tensor  # this rank's local rows it sends
    halo: torch.Tensor  # [own segments, K-1] gathered tail row of each halo position (last: zeros)
    halo_len: int  # K-1: the conv inputs each segment needs before it


def _plan(fwd: Forward, kernel: int) -> _Plan:
    """The segments of `fwd` for a conv of `kernel` (cached on `fwd`, per kernel size)."""
    plans = vars(fwd).setdefault(_PLANS, {})
    if kernel in plans:
        return plans[kernel]
    cp = fwd.cp_size
    pos = fwd.order.detach().cpu().view(cp, -1)  # every rank's positions, ascending
    n = pos.shape[1]
    rank = fwd.group.rank()
    first = torch.ones_like(pos, dtype=torch.bool)
    first[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1  # the rows that start a segment
    segs = []  # (start position, rank, local offset, length), rank-major
    for r, lo in first.nonzero().tolist():
        if segs and segs[-1][1] == r:
            segs[-1] = (*segs[-1][:3], lo - segs[-1][2])
        segs.append((int(pos[r, lo]), r, lo, n - lo))
    index = {s[0]: j for j, s in enumerate(sorted(segs))}  # position-order index of each segment
    seg_counts = [sum(1 for s in segs if s[1] == r) for r in range(cp)]
    order_rows = [0] * len(segs)
    for row, s in enumerate(segs):  # segs is rank-major: the gathered summaries' order
        order_rows[index[s[0]]] = row
    halo_len = kernel - 1
    tail_counts, tail_local, tail_row = [0] * cp, [], {}
    for start, r, lo, length in segs:
        t = min(length, halo_len)
        for k in range(length - t, length):
            tail_row[start + k] = len(tail_row)
            if r == rank:
                tail_local.append(lo + k)
        tail_counts[r] += t
    own = [(index[s[0]], s[2], s[3]) for s in segs if s[1] == rank]
    zero = len(tail_row)
    starts = {s[2]: s[0] for s in segs if s[1] == rank}
    halo = [
        [
            tail_row.get(starts[lo] - halo_len + k, zero) if starts[lo] - halo_len + k >= 0 else zero
            for k in range(halo_len)
        ]
        for _, lo, _ in own
    ]
    device = fwd.positions.device
    plan = _Plan(
        own=own,
        seg_counts=seg_counts,
        order=order_rows,
        tail_counts=tail_counts,
        tail_local=torch.tensor(tail_local, dtype=torch.int64, device=device),
        halo=torch.tensor(halo, dtype=torch.int64, device=device).view(len(own), halo_len),
        halo_len=halo_len,
    )
    plans[kernel] = plan
    return plan


def processed(fwd: Forward | None) -> list:
    """The rows the recurrence of each linear-attention call of the forward `fwd` ran on, per
    sequence (this rank's rows when divided; the padded length on the gathered path)."""
    return list(vars(fwd).get(_RECORD, [])) if fwd is not None else []


def _record(fwd: Forward, rows: int) -> None:
    """Records that a call's recurrence ran on `rows` rows (`processed`)."""
    vars(fwd).setdefault(_RECORD, []).append(int(rows))


def _functions(module: torch.nn.Module) -> tuple[Any, Any, Any] | None:
    """(rule, conv_forward, conv_fn) of the layer's transformers module, or None where the layer
    lacks what the divided path needs."""
    source = sys.modules.get(type(module).__module__)
    rule = getattr(source, "torch_chunk_gated_delta_rule", None)
    conv_forward = getattr(source, "causal_conv1d_forward", None)
    conv_fn = getattr(source, "causal_conv1d_fn", None)
    if rule is None or (conv_forward is None and conv_fn is None):
        return None
    if not all(hasattr(module, a) for a in _ATTRS):
        return None
    return rule, conv_forward, conv_fn


def forward(module: torch.nn.Module, fwd: Forward, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """The layer's forward on this rank's rows (hidden_states [B, local, hidden]) -> [B, local,
    hidden]. Collective (two all-gathers per call, none on a single rank). The KV cache and the
    attention mask are ignored (the CP forward refused them)."""
    for name in ("cu_seq_lens_q", "seq_idx", "cu_seqlens"):
        if kwargs.get(name) is not None:
            raise FrameshardError(
                "frameshard.hf.context_parallel: expected no packed sequences (%s) in the linear "
                "attention under context parallelism, got them" % name
            )
    functions = _functions(module)
    if functions is None:
        return _gathered(module, fwd, hidden_states, *args, **kwargs)
    return _divided(module, fwd, hidden_states, functions)


def _gathered(module: torch.nn.Module, fwd: Forward, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """All-gather the input, run the layer on the whole sequence, keep this rank's rows."""
    for name in ("cache", "cache_params"):  # the KV cache's name since 5.24, and before
        kwargs.pop(name, None)
    kwargs[_compat.cache_name(type(module).forward, ("cache", "cache_params"))] = None
    kwargs["attention_mask"] = None
    whole = fwd.gather(hidden_states.transpose(0, 1))[fwd.inverse].transpose(0, 1)
    _record(fwd, whole.shape[1])
    return type(module).forward(module, whole, *args, **kwargs)[:, fwd.positions]


def _conv(module: torch.nn.Module, functions: tuple, x: torch.Tensor) -> torch.Tensor:
    """The layer's causal conv1d (and activation) of x [B, C, T] -> [B, C, T], as the layer calls it."""
    _, conv_forward, conv_fn = functions
    if conv_forward is not None:  # transformers 5.25: the conv with its cache handling (none here)
        return conv_forward(module.conv1d, x, None, getattr(module, "layer_idx", 0), activation=module.activation)
    return conv_fn(x, module.conv1d.weight.squeeze(1), module.conv1d.bias, activation=module.activation)


def _rows(t: torch.Tensor, plan: _Plan, members: list, length: int) -> torch.Tensor:
    """The rows of the segments `members` (each `length` long) of t [B, local, ...] -> [m, B, length, ...]."""
    return torch.stack([t[:, plan.own[i][1] : plan.own[i][1] + length] for i in members])


def _divided(module: torch.nn.Module, fwd: Forward, hidden_states: torch.Tensor, functions: tuple) -> torch.Tensor:
    """The layer on this rank's rows (see the module): per position as the layer; the conv over
    [halo; segment] and one call of the rule per group of equal-length segments; the states
    entering the segments from every rank's summaries; per position again. Collective (two
    all-gathers, the first none for a kernel of 1)."""
    batch, n, _ = hidden_states.shape
    dv = module.head_v_dim
    plan = _plan(fwd, int(module.conv1d.weight.shape[-1]))
    work = torch.promote_types(hidden_states.dtype, torch.float32)  # the rule's inputs (it computes in float32)
    mixed, z, beta, g = _projections(module, hidden_states)
    halos = _halos(fwd, plan, mixed)
    zero_out, query_out, summaries = _run_segments(module, functions, plan, (mixed, halos, beta, g), work)
    _record(fwd, sum(length for _, _, length in plan.own))
    entering, every = _entering_states(fwd, plan, summaries)
    core = _outputs(plan, zero_out, query_out, entering, every).to(hidden_states.dtype)  # [B, n, H, dv]

    # Per position again, as the layer: the gated norm and the output projection.
    core = module.norm(core.reshape(-1, dv), z.reshape(-1, dv)).reshape(batch, n, -1)
    return module.out_proj(core)


def _projections(module: torch.nn.Module, hidden_states: torch.Tensor) -> tuple:
    """Per position, as the layer: (the conv's input `mixed` [B, n, C], the gate z [B, n, Hv,
    dv], beta [B, n, Hv], the decay g [B, n, Hv], float32)."""
    batch, n, _ = hidden_states.shape
    mixed = module.in_proj_qkv(hidden_states)
    z = module.in_proj_z(hidden_states).reshape(batch, n, -1, module.head_v_dim)
    beta = module.in_proj_b(hidden_states).sigmoid()
    a = module.in_proj_a(hidden_states)
    g = -module.A_log.float().exp() * softplus(a.float() + module.dt_bias)  # the layer's expression
    return mixed, z, beta, g


def _halos(fwd: Forward, plan: _Plan, mixed: torch.Tensor) -> torch.Tensor | None:
    """The conv halos: the K-1 conv inputs before each of this rank's segments, from the ranks
    holding them (one all-gather; zeros before position 0) -> [own segments, K-1, B, C]; None
    for a kernel of 1."""
    if plan.halo_len == 0:
        return None
    batch, _, channels = mixed.shape
    tails = mixed[:, plan.tail_local].transpose(0, 1).reshape(plan.tail_local.numel(), -1)
    rows = all_gather_rows(tails.contiguous(), plan.tail_counts, fwd.group, timeout=fwd.timeout)
    rows = torch.cat([rows, rows.new_zeros(1, rows.shape[1])])  # the zeros before position 0
    return rows[plan.halo.reshape(-1)].view(len(plan.own), plan.halo_len, batch, channels)


def _run_segments(
    module: torch.nn.Module, functions: tuple, plan: _Plan, inputs: tuple, work: torch.dtype
) -> tuple[list, list, list]:
    """This rank's segments through the conv and the rule, each group of equal-length segments
    in one batch; `inputs` = (mixed, halos, beta, g). -> per own segment (local order): its
    outputs from a zero state O(0) [B, L, Hv, dv], Q [B, L, Hv, dk] and its summary [F | A]
    [B, Hv, dk, dv + dk]."""
    mixed, halos, beta, g = inputs
    dv = module.head_v_dim
    groups: dict = {}
    for i, (_, _, length) in enumerate(plan.own):
        groups.setdefault(length, []).append(i)
    count = len(plan.own)
    zero_out, query_out, summaries = [None] * count, [None] * count, [None] * count
    for length, members in groups.items():
        x = _conv_segments(module, functions, plan, mixed, halos, members, length)
        g_rows = _rows(g, plan, members, length).flatten(0, 1)
        beta_rows = _rows(beta, plan, members, length).flatten(0, 1).to(work)
        out, final = _rule_segments(module, functions[0], x, g_rows, beta_rows, work)
        out, final = out.unflatten(0, (len(members), -1)), final.unflatten(0, (len(members), -1))
        for slot, i in enumerate(members):
            zero_out[i], query_out[i], summaries[i] = out[slot, ..., :dv], out[slot, ..., dv:], final[slot]
    return zero_out, query_out, summaries


def _conv_segments(
    module: torch.nn.Module,
    functions: tuple,
    plan: _Plan,
    mixed: torch.Tensor,
    halos: torch.Tensor | None,
    members: list,
    length: int,
) -> torch.Tensor:
    """The layer's causal conv (and activation) of the segments `members` (each `length` long)
    run on [halo; segment], the segments' rows kept -> [m B, L, C]."""
    m, batch, channels = len(members), mixed.shape[0], mixed.shape[-1]
    x = _rows(mixed, plan, members, length)  # [m, B, L, C]
    if halos is not None:
        x = torch.cat([halos[members].permute(0, 2, 1, 3), x], dim=2)
    x = x.reshape(m * batch, -1, channels).transpose(1, 2)
    return _conv(module, functions, x)[:, :, plan.halo_len :].transpose(1, 2)


def _rule_segments(
    module: torch.nn.Module, rule: Any, x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, work: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """One call of the layer's rule on the conv outputs x [m B, L, C] of m segments (g and beta
    [m B, L, Hv]), q, k, v in the working dtype `work`: values [v | 0] and initial state [0 | I]
    -> outputs [O(0) | Q] [m B, L, Hv, dv + dk] and final states [F | A] [m B, Hv, dk, dv + dk]."""
    dk, dv, hk, hv = module.head_k_dim, module.head_v_dim, module.num_k_heads, module.num_v_heads
    rows, length, _ = x.shape
    q, k, v = torch.split(x, [module.key_dim, module.key_dim, module.value_dim], dim=-1)
    q = q.reshape(rows, length, -1, dk).to(work)
    k = k.reshape(rows, length, -1, dk).to(work)
    v = v.reshape(rows, length, -1, dv).to(work)
    if hv // hk > 1:  # grouped value heads (the rule of 5.24+ repeats them itself, 5.17's layer before it)
        q, k = q.repeat_interleave(hv // hk, dim=2), k.repeat_interleave(hv // hk, dim=2)
    values = torch.cat([v, v.new_zeros(*v.shape[:-1], dk)], dim=-1)
    state = torch.zeros(rows, hv, dk, dv + dk, dtype=torch.float32, device=v.device)
    state[..., dv:] = torch.eye(dk, dtype=torch.float32, device=v.device)
    out, final = rule(
        q,
        k,
        values,
        g=g,
        beta=beta,
        initial_state=state,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    return out, final


def _entering_states(fwd: Forward, plan: _Plan, summaries: list) -> tuple[list, torch.Tensor]:
    """The state entering each segment, in position order (None: the zero state at position 0):
    every rank's summaries [F | A] all-gathered (one all-gather) and scanned, S_j = A_{j-1}
    S_{j-1} + F_{j-1} -> (the states, the gathered summaries)."""
    batch, hv, dk, width = summaries[0].shape
    dv = width - dk
    mine = torch.stack([s.reshape(-1) for s in summaries])  # every rank holds >= 1 segment
    every = all_gather_rows(mine.contiguous(), plan.seg_counts, fwd.group, timeout=fwd.timeout)
    every = every.view(-1, batch, hv, dk, width)
    last = max(j for j, _, _ in plan.own)
    entering, s = [], None
    for j in range(last + 1):
        entering.append(s)
        step = every[plan.order[j]]
        s = step[..., :dv] if s is None else step[..., dv:] @ s + step[..., :dv]
    return entering, every


def _outputs(plan: _Plan, zero_out: list, query_out: list, entering: list, every: torch.Tensor) -> torch.Tensor:
    """Each of this rank's segments' outputs O(0) + Q @ S (S: the state entering it), its rows
    in local order -> [B, n, Hv, dv] (in the working dtype)."""
    core = []
    for i, (j, _, _) in enumerate(plan.own):
        o = zero_out[i]
        if entering[j] is not None:
            o = o + torch.einsum("blhk,bhkv->blhv", query_out[i], entering[j].to(o.dtype))
        else:  # the segment at position 0 (zero state). The empty sum (0, in the graph) makes
            # every rank's backward join the all-gather's reduce-scatter, also a rank holding
            # only this segment (contiguous rank 0), which uses no gathered state.
            o = o + every[:0].sum().to(o.dtype)
        core.append(o)
    return torch.cat(core, dim=1)
