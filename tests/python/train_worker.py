#!/usr/bin/env python3
"""One rank of test_wrappers.py: frameshard.hf.enable under the wrappers trainers hold their
models in, and with the training features they use.

    python train_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b|all]

worker_common.main joins the Gloo group, runs the scenarios and writes DIR/rank<R>.json; the
assertions live in test_wrappers.py. Scenario names are "<what>:<family>":

  features (every family of hf_models.FAMILIES): hf_ckpt, hf_ckpt_reentrant (HF's
    gradient_checkpointing_enable), ckpt, ckpt_reentrant (torch.utils.checkpoint around the vision
    module), autocast_bf16 (CPU autocast), bf16, fp16 (parameters), frozen (requires_grad_(False)
    on the vision module), no_grad, inference_mode, two_calls (images then videos, one backward).
  wrappers (WRAPPER_FAMILIES): fsdp2_after / fsdp2_before (fully_shard on the vision module after
    / before hf.enable), fsdp2_blocks (on its blocks and itself), fsdp1
    (FullyShardedDataParallel, use_orig_params=True), ddp_model / ddp_module (DDP(model) or its
    .module passed to enable), compile_eager / compile_aot_eager (torch.compile(vision module)
    assigned back), compile_warm (compiled and run before hf.enable), compile_model
    (torch.compile(model)), peft (LoRA in the vision tower's attention and MLP and in the
    language model), visual_attr (the .model / .model.visual forms), ckpt_wrapper
    (checkpoint_wrapper around the vision module), ckpt_full_recompute (torch.utils.checkpoint
    without early stop: the backward recomputes the whole sharded forward, collectives included).
  AT_WORLDS lists the scenarios run at one world size only, or only by hand (time).

Every parity scenario runs one training step replicated (a plain copy of the model: frameshard
off, no wrapper) and one sharded (the wrapper, hf.enable), each rank with its own loss weights
(worker_common.rank_weights), and reports the max difference of the outputs and of every
parameter gradient after the SUM over the group that the data-parallel all-reduce would do.
Wrappers that reduce gradients themselves (DDP, FSDP1/2) average over the group: their gradients
are taken times the world size. Low-precision scenarios also run the step in float64 (same
rounded weights and inputs) and report both runs' errors against it. The scenarios know their
models by construction (class Held), not through frameshard.hf's unwrapping, which is under test.
"""

import contextlib
import copy
import os
import re
import sys

import torch
import torch.distributed as dist

import frameshard
from frameshard import hf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
import worker_common  # noqa: E402
from worker_common import compare, rank_weights  # noqa: E402

SHARD_ALL = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)
FEATURES = (
    "hf_ckpt",
    "hf_ckpt_reentrant",
    "ckpt",
    "ckpt_reentrant",
    "autocast_bf16",
    "bf16",
    "fp16",
    "frozen",
    "no_grad",
    "inference_mode",
    "two_calls",
)
WRAPPERS = (
    "fsdp2_after",
    "fsdp2_before",
    "fsdp2_blocks",
    "fsdp1",
    "ddp_model",
    "ddp_module",
    "compile_eager",
    "compile_aot_eager",
    "compile_warm",
    "compile_model",
    "peft",
    "visual_attr",
    "ckpt_wrapper",
    "ckpt_full_recompute",
)
# One family with DeepStack, one with windowed attention.
WRAPPER_FAMILIES = ("qwen3_vl", "qwen2_5_vl")
# Wrapper prefixes in parameter names (torch.compile, FSDP1, checkpoint_wrapper).
_WRAPPER_PREFIX = re.compile(r"(_orig_mod|_fsdp_wrapped_module|_checkpoint_wrapped_module)\.")


# ----------------------------------------------------------------- the step


class Held:
    """A model as a scenario holds it, known by construction (not through frameshard, whose
    unwrapping is under test):

    held: what the trainer holds and calls (and, in most scenarios, passes to hf.enable).
    base: the transformers model under the wrappers (the vision module for the vision-only
        families); its parameters are the ones compared.
    visual: the vision module itself.
    called: the vision module as the model calls it (a torch.compile, FSDP1 or checkpoint
        wrapper assigned back to .model.visual included).
    """

    def __init__(self, held, base, visual=None):
        self.held, self.base = held, base
        self.whole = hf_models.is_whole_model(base)
        self.visual = visual if visual is not None else (base.model.visual if self.whole else base)
        self.called = base.model.visual if self.whole else held


def build(family, dtype=torch.float64):
    """(model, inputs): the tiny random model of `family` (the vision module itself for the
    vision-only families) in `dtype`, inputs converted to it."""
    model, _visual, inputs = hf_models.build(family)
    model.to(dtype)
    inputs = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in inputs.items()}
    return model, inputs


def vision_call(m, pixel_values, grid, video=False):
    """The model's own vision path: get_image_features / get_video_features of a whole model,
    the (held) vision module's forward otherwise."""
    if not m.whole:
        return hf_models.flat_outputs(m.held(pixel_values, grid_thw=grid))
    if video:
        return hf_models.flat_outputs(
            m.base.model.get_video_features(pixel_values_videos=pixel_values, video_grid_thw=grid)
        )
    return hf_models.flat_outputs(m.base.model.get_image_features(pixel_values=pixel_values, image_grid_thw=grid))


def checkpointed_call(m, pixel_values, grid, use_reentrant, early_stop=True):
    """torch.utils.checkpoint.checkpoint around the vision module (it returns the output tensors:
    the reentrant variant only differentiates tensor outputs). Without `early_stop` the
    recomputation runs the whole sharded forward again, collectives included."""

    def run(pv, g):
        return tuple(hf_models.flat_outputs(m.called(pv, grid_thw=g)))

    with torch.utils.checkpoint.set_checkpoint_early_stop(early_stop):
        return list(torch.utils.checkpoint.checkpoint(run, pixel_values, grid, use_reentrant=use_reentrant))


def forward(m, inputs, rank, *, logits=True, video=False, checkpoint=None, pixel_grad=False):
    """One forward: {name: output} and the rank's loss over them. Vision features (images, then
    videos when `video`), then the whole model's logits (`logits`, whole models only)."""
    pv, grid = inputs["pixel_values"], inputs["image_grid_thw"]
    if pixel_grad:
        pv = pv.detach().requires_grad_(True)
        inputs = dict(inputs, pixel_values=pv)
    if checkpoint is None:
        outs = vision_call(m, pv, grid)
    else:
        outs = checkpointed_call(m, pv, grid, checkpoint == "reentrant", checkpoint != "full_recompute")
    tensors = {"vision_%d" % i: o for i, o in enumerate(outs)}
    if video:
        # Other pixels through the video path of the same vision module.
        for i, o in enumerate(vision_call(m, 0.5 * pv, grid, video=True)):
            tensors["video_%d" % i] = o
    if logits and m.whole:
        tensors["logits"] = m.held(**inputs).logits
    loss = sum((rank_weights(t, rank, 10 + i) * t).sum() for i, t in enumerate(tensors.values()))
    return tensors, loss, pv


def canonical(name):
    return _WRAPPER_PREFIX.sub("", name)


def summed_grads(base, group, world, averaged=()):
    """{canonical name: gradient summed over the group} of every parameter of `base`. FSDP2
    gradients (DTensor shards) are gathered; gradients that a wrapper already averaged over the
    group (FSDP2, FSDP1, the parameter ids in `averaged`) are multiplied by `world`; the rest are
    SUM-all-reduced here."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.tensor import DTensor

    grads = {}
    with contextlib.ExitStack() as stack:
        roots = [f for f in FSDP.fsdp_modules(base) if f.check_is_root()]
        for r in roots:
            stack.enter_context(FSDP.summon_full_params(r, with_grads=True))
        fsdp1_params = {id(p) for r in roots for p in r.parameters()}
        for name, p in base.named_parameters():
            g = p.grad
            if g is None:
                g = torch.zeros(p.shape, dtype=p.dtype)
            elif isinstance(g, DTensor):
                g = g.full_tensor() * world
            elif id(p) in fsdp1_params or id(p) in averaged:
                g = g.clone() * world
            else:
                g = g.clone()
                dist.all_reduce(g, group=group)
            grads[canonical(name)] = g.detach()
    return grads


def step(m, inputs, rank, world, group, *, averaged=(), grad_mode="train", backward_in_turn=False, **kw):
    """A training step (or an evaluation under `grad_mode` "no_grad" / "inference_mode"):
    ({output name: detached output}, {parameter: summed gradient}, extras)."""
    m.base.zero_grad(set_to_none=True)
    mode = {
        "train": contextlib.nullcontext,
        "no_grad": torch.no_grad,
        "inference_mode": torch.inference_mode,
    }[grad_mode]
    autocast = kw.pop("autocast", None)
    amp = torch.autocast("cpu", dtype=autocast) if autocast is not None else contextlib.nullcontext()
    with mode(), amp:
        tensors, loss, pv = forward(m, inputs, rank, **kw)
    extras = {
        "requires_grad": sorted(k for k, t in tensors.items() if t.requires_grad),
        "vision_grad_fn": type(tensors["vision_0"].grad_fn).__name__ if tensors["vision_0"].grad_fn else None,
        "dtypes": sorted({str(t.dtype) for t in tensors.values()}),
    }
    out = {k: t.detach().clone() for k, t in tensors.items()}
    if grad_mode != "train" or not loss.requires_grad:
        return out, {}, extras  # evaluation, or nothing to train (a frozen vision-only model)
    if backward_in_turn:
        # One rank after the other: a backward that needed the other ranks (a collective) would
        # wait for ranks that are at the barrier, and time out. Refused up front (on every rank
        # alike) when a vision output is differentiable, which would reach the gather's backward.
        vision = sorted(k for k in extras["requires_grad"] if not k.startswith("logits"))
        if vision:
            raise AssertionError("vision outputs %s require grad: the backward would reach the gather" % vision)
        for r in range(world):
            if r == rank:
                loss.backward()
            dist.barrier(group)
    else:
        loss.backward()
    grads = summed_grads(m.base, group, world, averaged)
    if kw.get("pixel_grad"):
        g = pv.grad.clone() if pv.grad is not None else torch.zeros_like(pv)
        dist.all_reduce(g, group=group)
        grads["<pixel_values>"] = g
    return out, grads, extras


class SeenRows:
    """The patch rows each call of the vision module's patch embedding saw."""

    def __init__(self, visual):
        self.rows = []
        self._hook = visual.patch_embed.register_forward_pre_hook(self._record)

    def _record(self, _module, args):
        self.rows.append(int(args[0].shape[0]))

    def remove(self):
        self._hook.remove()


def parity(rank, world, group, ref, m, inputs, enable=None, seen=None, averaged=(), truth=None, **kw):
    """Replicated step on `ref` (a Held), then `enable()` (None: hf.enable(m.held)) and the
    sharded step on `m`; the measurements test_wrappers.py reads. `seen`: a SeenRows of m.visual
    registered earlier (else one is registered here). `truth`: (Held, inputs) of a float64
    replicated run of the same step, against which both runs' rounding errors are measured."""
    ref_out, ref_grads, ref_extras = step(ref, inputs, rank, world, group, **kw)
    seen = seen if seen is not None else SeenRows(m.visual)
    seen.rows.clear()
    try:
        if enable is None:
            hf.enable(m.held, group, SHARD_ALL)
        else:
            enable()
        enabled = hf.is_enabled(m.held)
        out, grads, extras = step(m, inputs, rank, world, group, averaged=averaged, **kw)
    finally:
        seen.remove()
    # The plan hf.enable makes: it costs this tower (frameshard.tower_dims of its config).
    plan = frameshard.plan(inputs["image_grid_thw"], world, SHARD_ALL, tower=frameshard.tower_dims(m.visual.config))
    errors = {}
    if truth is not None:
        true_out, true_grads, _ = step(truth[0], truth[1], rank, world, group, **dict(kw, autocast=None))
        errors = {
            "out_err": compare(out, true_out)[0],
            "ref_out_err": compare(ref_out, true_out)[0],
            "grad_err": compare(grads, true_grads)[0],
            "ref_grad_err": compare(ref_grads, true_grads)[0],
        }
    return {
        **errors,
        "path": plan.path,
        "enabled": enabled,
        **worker_common.parity_record(out, ref_out, grads, ref_grads),
        "seen_rows": seen.rows,
        "plan_local_patch_rows": plan.ranks[rank].local_patch_rows,
        "total_patch_rows": plan.total_patch_rows,
        "ref": ref_extras,
        **extras,
    }


# ----------------------------------------------------------------- features


def scenario_feature(feature, family, rank, world, group):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "autocast_bf16": torch.float32}.get(feature, torch.float64)
    model, inputs = build(family, dtype)
    plain = copy.deepcopy(model)
    m, ref = Held(model, model), Held(plain, plain)
    kw = {}
    if dtype != torch.float64:
        # The float64 run of the same weights and inputs (rounded to `dtype` already).
        true_model = copy.deepcopy(model).double()
        true_inputs = {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}
        kw["truth"] = (Held(true_model, true_model), true_inputs)
    if feature in ("hf_ckpt", "hf_ckpt_reentrant"):
        for h in (m, ref):
            h.base.train()
            if feature == "hf_ckpt":
                h.base.gradient_checkpointing_enable()  # transformers 5: use_reentrant=False
            else:
                h.base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    elif feature == "ckpt":
        kw["checkpoint"] = "non_reentrant"
    elif feature == "ckpt_reentrant":
        # The reentrant checkpoint differentiates only through inputs that require grad.
        kw.update(checkpoint="reentrant", pixel_grad=True)
    elif feature == "autocast_bf16":
        kw["autocast"] = torch.bfloat16
    elif feature == "frozen":
        for h in (m, ref):
            h.visual.requires_grad_(False)
        kw["backward_in_turn"] = True
    elif feature in ("no_grad", "inference_mode"):
        kw["grad_mode"] = feature
    elif feature == "two_calls":
        kw.update(video=True, logits=False)
    timeout = 30 if feature == "frozen" else None  # a backward collective would time out

    def enable():
        hf.enable(model, group, SHARD_ALL, timeout=timeout)

    result = parity(rank, world, group, ref, m, inputs, enable=enable, **kw)
    if feature in ("hf_ckpt", "hf_ckpt_reentrant"):
        result["checkpointing"] = bool(m.visual.blocks[0].gradient_checkpointing) and model.training
    return result


# ----------------------------------------------------------------- wrappers


def scenario_wrapper(wrapper, family, rank, world, group):
    model, inputs = build(family)
    plain = copy.deepcopy(model)
    ref = Held(plain, plain)
    m = Held(model, model)
    visual = m.visual
    extra = {}
    kw = {}

    def assign_visual(wrapped):
        """`wrapped` (the vision module in a wrapper) assigned back where the model calls it."""
        if m.whole:
            model.model.visual = wrapped
            return Held(model, model, visual)
        return Held(wrapped, visual, visual)

    enable = None
    if wrapper in ("fsdp2_after", "fsdp2_before", "fsdp2_blocks"):
        from torch.distributed.fsdp import fully_shard

        if wrapper == "fsdp2_before":
            hf.enable(model, group, SHARD_ALL)
            enable = lambda: None  # noqa: E731  (already enabled)
        if wrapper == "fsdp2_blocks":
            for block in visual.blocks:
                fully_shard(block)
        fully_shard(visual)
        extra["visual_class"] = type(visual).__name__
        extra["block_class"] = type(visual.blocks[0]).__name__
    elif wrapper == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        # device_id: without an accelerator FSDP1 refuses a CPU module unless told CPU.
        m = assign_visual(FSDP(visual, use_orig_params=True, device_id=torch.device("cpu")))
        extra["visual_class"] = type(m.called).__name__
    elif wrapper in ("ddp_model", "ddp_module"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        m = Held(DDP(model), model)
        kw["averaged"] = {id(p) for p in model.parameters()}
        if wrapper == "ddp_module":
            enable = lambda: hf.enable(m.held.module, group, SHARD_ALL)  # noqa: E731
        extra["held_class"] = type(m.held).__name__
    elif wrapper.startswith("compile"):
        from torch import _dynamo

        _dynamo.reset()
        backend = "aot_eager" if wrapper == "compile_aot_eager" else "eager"
        if wrapper == "compile_model":
            m = Held(torch.compile(model, backend=backend), model)
        else:
            m = assign_visual(torch.compile(visual, backend=backend))
        if wrapper == "compile_warm":
            # Compiled and run once (frameshard off), then enabled: the compiled code must not
            # keep running the replicated forward it traced. The row counter is registered
            # first (registering a hook later would itself make torch.compile retrace).
            kw["seen"] = SeenRows(visual)
            with torch.no_grad():
                vision_call(m, inputs["pixel_values"], inputs["image_grid_thw"])
        extra["held_class"] = type(m.held).__name__
        extra["visual_class"] = type(m.called).__name__
    elif wrapper == "peft":
        import peft

        target = (
            r".*blocks\.\d+\.(attn\.(qkv|proj)|mlp\.(fc1|fc2|linear_fc1|linear_fc2|gate_proj|up_proj|down_proj))"
            r"|.*language_model\.layers\.\d+\.self_attn\.(q_proj|v_proj)"
        )
        torch.manual_seed(5)
        # init_lora_weights=False: B is random too, so A and B both get gradients.
        config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=target, init_lora_weights=False)
        lora = peft.get_peft_model(model, config).double()
        copied = copy.deepcopy(lora)
        m, ref = Held(lora, lora.get_base_model()), Held(copied, copied.get_base_model())
        names = [n for n, p in lora.named_parameters() if p.requires_grad]
        extra["lora_vision"] = sum(1 for n in names if "lora_" in n and ".blocks." in n)
        extra["lora_lm"] = sum(1 for n in names if "lora_" in n and "language_model" in n)
        extra["trainable"] = len(names)
        extra["held_class"] = type(lora).__name__
    elif wrapper == "ckpt_wrapper":
        # What FSDP-style trainers apply (non-reentrant torch.utils.checkpoint), on the vision
        # module the model calls.
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        m = assign_visual(checkpoint_wrapper(visual))
        extra["visual_class"] = type(m.called).__name__
    elif wrapper == "ckpt_full_recompute":
        kw["checkpoint"] = "full_recompute"
    elif wrapper == "visual_attr":
        # Enabled through model.model (it has .visual), checked and disabled through the vision
        # module itself.
        enable = lambda: hf.enable(model.model if m.whole else model, group, SHARD_ALL)  # noqa: E731
    result = parity(rank, world, group, ref, m, inputs, enable=enable, **kw)
    result.update(extra)
    if wrapper.startswith("compile"):
        from torch._dynamo.utils import counters

        # Graphs captured: the tower's own code was compiled.
        result["graphs"] = int(counters["stats"]["unique_graphs"])
    if wrapper == "visual_attr":
        result["disabled"] = hf.disable(visual) and not hf.is_enabled(model)
    else:
        result["disabled"] = hf.disable(m.held) and not hf.is_enabled(m.held)
    return result


# Scenarios run at one world size only, or (an empty tuple) only when asked for by name or with
# --scenarios all (test_wrappers.py: FRAMESHARD_TEST_SCENARIOS=all): torch.compile traces the
# tower again for each backend, model and shape, 6-25 s of CPU per rank each (measured: eager 6-7,
# aot_eager 9-19, compiled and run before enable 13-21, whole model 15-25), more than the time
# budget of CI (2 cores) allows at every world. compile_eager runs for both families at every
# world; every scenario here passed at world 2 and 3 when run by hand.
AT_WORLDS = {
    "compile_aot_eager:qwen3_vl": (2,),
    "compile_aot_eager:qwen2_5_vl": (),
    "compile_warm:qwen2_5_vl": (),
    "compile_warm:qwen3_vl": (),
    "compile_model:qwen3_vl": (),
    "compile_model:qwen2_5_vl": (),
}


# At world 3 (an uneven split of every batch) only the families whose geometry differs run every
# feature: Qwen2.5-VL (windows) and Qwen3-VL (DeepStack). The others' vision modules run the same
# frameshard path and the same wrappers as these and run every feature at world 2; at world 3 they
# cost 58 of the launch's 88 scenarios (measured: 47 s of CPU per rank, 3 ranks on CI's 2 cores).
UNEVEN_WORLD_FAMILIES = ("qwen2_5_vl", "qwen3_vl")


def scenarios_at(world):
    """The scenarios a launch at `world` ranks runs by default."""
    return [
        n
        for n in SCENARIOS
        if world in AT_WORLDS.get(n, (world,)) and (world == 2 or n.split(":")[1] in UNEVEN_WORLD_FAMILIES)
    ]


SCENARIOS = {}
for _family in hf_models.FAMILIES:
    for _feature in FEATURES:
        SCENARIOS["%s:%s" % (_feature, _family)] = lambda r, w, g, _x=_feature, _f=_family: scenario_feature(
            _x, _f, r, w, g
        )
for _family in WRAPPER_FAMILIES:
    for _wrapper in WRAPPERS:
        SCENARIOS["%s:%s" % (_wrapper, _family)] = lambda r, w, g, _x=_wrapper, _f=_family: scenario_wrapper(
            _x, _f, r, w, g
        )


if __name__ == "__main__":
    worker_common.main(SCENARIOS, scenarios_at)
