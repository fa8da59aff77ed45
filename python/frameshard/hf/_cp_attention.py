"""The CP attention's kernel without a mask: each run of this rank's contiguous rows attends to the
keys before it (no mask) and to its own rows (causal), merged by their log-sum-exps.

    out = _cp_attention.flash_runs(query, kv, fwd, scaling, dropout)   # None: not here

The masked path (_cp._attention: SDPA over every gathered key with a [local, padded] boolean mask)
holds the mask, which SDPA widens to the query's dtype and keeps for the backward: at 16K tokens
and CP 2 that is 8K x 16K floats per layer, more than the unsharded causal attention holds (its
kernel builds no mask). Here each run [a, a+n) of the rank's global positions takes two calls of
the CPU flash kernel, the prefix keys [0, a) without a mask and the diagonal block [a, a+n)
causal (square: top-left and bottom-right causal agree), and merges them by their log-sum-exps.
The backward calls the kernel's backward per piece with the MERGED output and log-sum-exp, which
gives each piece's exact share of the gradient (the softmax's correction term rowsum(dO * O) is
the merged output's), as ring attention does. Exact: the same softmax, computed in pieces.

CPU only (torch's `_scaled_dot_product_flash_attention_for_cpu` and its backward), without
dropout; elsewhere `flash_runs` returns None and the masked path runs.
"""

from __future__ import annotations

from typing import Any

import torch

_aten = torch.ops.aten
_HAS_KERNEL = hasattr(_aten, "_scaled_dot_product_flash_attention_for_cpu") and hasattr(
    _aten, "_scaled_dot_product_flash_attention_for_cpu_backward"
)


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: Any) -> tuple:
    return _aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)


class _Run(torch.autograd.Function):
    """One run's attention: queries [B, H, n, D] against the prefix keys [B, H, a, D] (a may be
    0) and the diagonal keys [B, H, n, D], causal on the diagonal."""

    @staticmethod
    def forward(ctx, q, k_prefix, v_prefix, k_diag, v_diag, scale):  # noqa: ANN001, ANN205
        out, lse = _flash(q, k_diag, v_diag, True, scale)
        if k_prefix.shape[2]:
            out_p, lse_p = _flash(q, k_prefix, v_prefix, False, scale)
            merged = torch.logaddexp(lse, lse_p)
            out = out * torch.exp(lse - merged).unsqueeze(-1) + out_p * torch.exp(lse_p - merged).unsqueeze(-1)
            lse = merged
        out = out.contiguous()
        ctx.save_for_backward(q, k_prefix, v_prefix, k_diag, v_diag, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        q, k_prefix, v_prefix, k_diag, v_diag, out, lse = ctx.saved_tensors
        grad = grad.contiguous()
        backward = _aten._scaled_dot_product_flash_attention_for_cpu_backward
        dq, dk, dv = backward(grad, q, k_diag, v_diag, out, lse, 0.0, True, scale=ctx.scale)
        if not k_prefix.shape[2]:  # the first run: no prefix, its gradients are empty
            return dq, torch.zeros_like(k_prefix), torch.zeros_like(v_prefix), dk, dv, None
        dq_p, dk_p, dv_p = backward(grad, q, k_prefix, v_prefix, out, lse, 0.0, False, scale=ctx.scale)
        dq = dq + dq_p
        return dq, dk_p, dv_p, dk, dv, None


def runs(positions: torch.Tensor) -> list[tuple[int, int, int]]:
    """(local start, global start, length) of each run of consecutive positions (ascending)."""
    pos = positions.tolist()
    out, start = [], 0
    for i in range(1, len(pos) + 1):
        if i == len(pos) or pos[i] != pos[i - 1] + 1:
            out.append((start, pos[start], i - start))
            start = i
    return out


def flash_runs(query: torch.Tensor, kv: torch.Tensor, fwd: Any, scaling: Any, dropout: float) -> torch.Tensor | None:
    """query [B, H, local, D], kv [B, 2 Hkv, padded, D] (the gathered keys then values, rank-major;
    H a multiple of Hkv) -> the attention output [B, H, local, D]; None where the CPU kernel
    cannot run it (not a CPU tensor, dropout, a torch without the kernel). Holds one copy of the
    keys and values, in global order: the pieces are views of it, a key head serving its
    H / Hkv query heads as a stride-0 view (no repeated copy)."""
    if not _HAS_KERNEL or query.device.type != "cpu" or dropout > 0.0:
        return None
    b, heads, _, d = query.shape
    hkv = kv.shape[1] // 2
    groups = heads // hkv
    kv = kv[:, :, fwd.inverse.to(kv.device)]  # global order
    outs = []
    for local, start, n in runs(fwd.positions):
        per_head = []
        for h in range(hkv):
            q = query[:, h * groups : (h + 1) * groups, local : local + n]
            k, v = kv[:, h : h + 1], kv[:, hkv + h : hkv + h + 1]

            def piece(x: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
                return x[:, :, lo:hi].expand(b, groups, hi - lo, d)

            per_head.append(_Run.apply(q, piece(k, 0, start), piece(v, 0, start),
                                       piece(k, start, start + n), piece(v, start, start + n), scaling))  # fmt: skip
        outs.append(torch.cat(per_head, dim=1) if hkv > 1 else per_head[0])
    return torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]
