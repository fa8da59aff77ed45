#!/usr/bin/env python3
"""One process of test_trl.py: TRL's GRPOTrainer (trl pinned in .venv) with and without
frameshard.integrations.trl, on tiny random Qwen-VL models and local processors, 2 processes
(Gloo, DDP through accelerate as TRL sets it up).

    python trl_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

Each parity scenario trains the same model twice from the same seed -- without the integration,
then with it -- for 2 optimizer steps and records: the per-step losses, every parameter before
and after, and per vision call (tower rows this process's patch embedding saw; with the
integration the pass, the plan's distinct and total rows over all processes, and this process's
real and local rows). The test compares the arms and checks that every vision pass encoded each
distinct image once across the processes.
"""

import contextlib
import dataclasses
import functools
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))


@dataclasses.dataclass
class Setup:
    """One GRPO run: the family, dtype, what the trainer runs (beta > 0: the reference pass;
    steps_per_generation > 1: the old log-prob pass), the data and how the model is held."""

    family: str = "qwen2_vl"
    dtype: torch.dtype = torch.float32
    beta: float = 0.04
    # 3 rows per process and micro-step, a generation of 2 micro-steps: 12 rows, three prompts of 4
    # copies each, the second spread over both processes (rows 4-7), every call holding several.
    per_device: int = 3
    generations: int = 4
    steps_per_generation: int = 2
    sizes: tuple = ((16, 16),)  # one size: a key that confused two prompts would go unseen by shape
    prompts: int = 8
    text_only: tuple = ()  # prompt indices without an image
    peft: bool = False
    fsdp2: bool = False
    frozen: bool = False
    keys: str = "groups"


def _env(rank, world):
    # accelerate reads the launch from the environment; the group exists already (worker_common).
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")


def _model_dir(setup, tmp):
    """The tiny model of the family saved to `tmp` (TRL builds the reference model from its path)."""
    import hf_models

    path = os.path.join(tmp, "%s_%s" % (setup.family, str(setup.dtype).split(".")[-1]))
    if not os.path.isdir(path):
        model, _, _ = hf_models.build(setup.family)
        model.config.text_config.pad_token_id = 0
        model.config.text_config.bos_token_id = None
        model.to(setup.dtype).save_pretrained(path)
    return path


def _dataset(setup):
    import trl_grpo

    return trl_grpo.prompts(setup.prompts, sizes=setup.sizes, text_only=setup.text_only)


@contextlib.contextmanager
def _fsdp2(trainer):
    """accelerate's FSDP2 plugin on Gloo: accelerate takes FSDP only on GPUs (MULTI_CPU ignores the
    plugin), so the trainer's state is set as a GPU launch would set it; prepare() then runs
    accelerate's own fsdp2_prepare_model over the CPU processes."""
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    state = trainer.accelerator.state
    before = state.distributed_type, getattr(state, "fsdp_plugin", None)
    state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        reshard_after_forward=True,
        transformer_cls_names_to_wrap=list(trainer.model._no_split_modules),
    )
    trainer.is_fsdp_enabled = True
    try:
        yield
    finally:
        state.distributed_type, state.fsdp_plugin = before


def _keep(features, out):
    tensors = [out.pooler_output] + list(getattr(out, "deepstack_features", None) or [])
    if tensors[0].shape[0] > 0:  # not a join
        features.append([t.detach().double().clone() for t in tensors])


def _trainer(setup, tmp):
    """The GRPOTrainer of `setup` over the model saved in `tmp`."""
    import trl
    import trl_grpo

    kwargs = dict(dtype=setup.dtype, attn_implementation="eager")
    config = trl_grpo.grpo_config(
        os.path.join(tmp, "out"),
        per_device_train_batch_size=setup.per_device,
        num_generations=setup.generations,
        steps_per_generation=setup.steps_per_generation,
        max_completion_length=6,
        max_steps=2,
        beta=setup.beta,
        # Plain SGD without clipping: each update is -lr * the gradient, so that comparing updates
        # compares gradients (AdamW's normalisation would hide a gradient of the wrong scale).
        optim="sgd",
        learning_rate=0.05,
        max_grad_norm=0.0,
        weight_decay=0.0,
        seed=3,
        shuffle_dataset=False,
        model_init_kwargs=kwargs,
    )
    peft_config = None
    if setup.peft:
        import peft

        # The language model's attention and the tower's: both get gradients.
        peft_config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "qkv"])
    model = _model_dir(setup, tmp)
    if setup.frozen:
        import transformers

        model = transformers.AutoModelForImageTextToText.from_pretrained(model, **kwargs)
        model.model.visual.requires_grad_(False)
    return trl.GRPOTrainer(
        model=model,
        reward_funcs=trl_grpo.token_reward,
        args=config,
        train_dataset=_dataset(setup),
        processing_class=trl_grpo.tiny_processor(setup.family),
        peft_config=peft_config,
    )


def _watch_towers(trainer, setup, seen, features):
    """The rows of every tower call of the policy and the reference model into `seen`; what
    every vision call with images of this process returned into `features`."""
    for model in (trainer.model, getattr(trainer, "ref_model", None)):
        if model is not None:
            visual = (model.get_base_model() if setup.peft else model).model.visual
            visual.patch_embed.register_forward_pre_hook(lambda _m, a: seen.append(int(a[0].shape[0])))
            visual.register_forward_hook(lambda _m, _a, out: _keep(features, out))


def _watch_calls(trainer, rank, calls):
    """Each enabled vision call into `calls`: its pass, the plan's distinct and total rows over
    all processes, this process's real and local rows and its own images (0: a join)."""
    from frameshard.hf import _patches

    lockstep = _patches.state(trainer, "trl").lockstep
    after, before_call = lockstep.after, lockstep.before
    own = []

    def before(visual, grid_thw):
        own.append(int(grid_thw.shape[0]))
        return before_call(visual, grid_thw)

    def record(plan):
        after(plan)
        d = plan.dedup
        calls.append(
            dict(
                name=lockstep.current.name if lockstep.current else None,
                distinct=d.distinct_patch_rows,
                total=d.patch_rows,
                real=plan.ranks[rank].real_patch_rows,
                local=plan.ranks[rank].local_patch_rows,
                own=own[-1],
            )
        )

    lockstep.before, lockstep.after = before, record


def _train(trainer, setup):
    """trainer.train(); every parameter's gradient at each optimizer step."""
    grads = []
    original_step = torch.optim.SGD.step

    def step(self, *a, **k):
        grads.append(
            {
                n: (p.grad.detach().double().clone() if p.grad is not None else None)
                for n, p in trainer.model.named_parameters()
            }
        )
        return original_step(self, *a, **k)

    torch.optim.SGD.step = step
    torch.manual_seed(7)
    try:
        with _fsdp2(trainer) if setup.fsdp2 else contextlib.nullcontext():
            trainer.train()
    finally:
        torch.optim.SGD.step = original_step
    return grads


def run(setup, enabled, tmp, rank, prepare=None):
    """One GRPO run (see the module docstring); returns its record."""
    from frameshard.integrations import trl as fs_trl

    trainer = _trainer(setup, tmp)
    seen, features, calls = [], [], []
    _watch_towers(trainer, setup, seen, features)
    if prepare is not None:
        prepare(trainer)
    if enabled:
        fs_trl.enable(trainer, keys=setup.keys)
        _watch_calls(trainer, rank, calls)
    before = {n: p.detach().double().clone() for n, p in trainer.model.named_parameters()}
    grads = _train(trainer, setup)
    after = {}
    for n, p in trainer.model.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        after[n] = full.detach().double()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    base = trainer.model.get_base_model() if setup.peft else trainer.model
    return dict(
        checkpointing=bool(base.is_gradient_checkpointing),  # GRPOConfig's default, as users run it
        losses=[e["loss"] for e in logs],
        metrics=[{k: v for k, v in e.items() if k.startswith("frameshard/")} for e in logs],
        before=before,
        after=after,
        seen=seen,
        calls=calls,
        grads=grads,
        features=features,
        enabled=enabled and fs_trl.disable(trainer),
    )


def parity(setup):
    def scenario(rank, world, group):
        _env(rank, world)
        with _shared_tmp(group, setup) as tmp:
            off = run(setup, False, tmp, rank)
            on = run(setup, True, tmp, rank)
        return compare(off, on, setup)

    return scenario


@contextlib.contextmanager
def _shared_tmp(group, setup):
    """worker_common.shared_tmp, with the setup's model saved in it by rank 0."""
    import torch.distributed as dist

    import worker_common

    with worker_common.shared_tmp(group) as tmp:
        if dist.get_rank(group) == 0:
            _model_dir(setup, tmp)
        dist.barrier(group)
        yield tmp


def compare(off, on, setup):
    """The record test_trl.py asserts on."""
    loss_diff = max((abs(a - b) for a, b in zip(off["losses"], on["losses"], strict=True)), default=0.0)
    param_diff, param_scale, update_rel = 0.0, 0.0, 0.0
    for name, a in off["after"].items():
        b = on["after"][name]
        param_diff = max(param_diff, float((a - b).abs().max()))
        param_scale = max(param_scale, float(a.abs().max()))
        du_off = a - off["before"][name]
        du_on = b - on["before"][name]
        scale = float(du_off.abs().max())
        if scale > 0:
            update_rel = max(update_rel, float((du_on - du_off).abs().max()) / scale)
    vision_update = max(
        (float((a - off["before"][n]).abs().max()) for n, a in off["after"].items() if ".visual." in n), default=0.0
    )
    grad_diff, grad_scale, vision_grad_diff, vision_grad_scale = 0.0, 0.0, 0.0, 0.0
    for g_off, g_on in zip(off["grads"], on["grads"], strict=True):
        for n, a in g_off.items():
            if a is None:
                continue
            diff, scale = float((g_on[n] - a).abs().max()), float(a.abs().max())
            grad_diff, grad_scale = max(grad_diff, diff), max(grad_scale, scale)
            if ".visual." in n:
                vision_grad_diff, vision_grad_scale = max(vision_grad_diff, diff), max(vision_grad_scale, scale)
    feature_diff, feature_scale = 0.0, 0.0
    for f_off, f_on in zip(off["features"], on["features"], strict=True):
        for a, b in zip(f_off, f_on, strict=True):
            feature_diff = max(feature_diff, float((a - b).abs().max()))
            feature_scale = max(feature_scale, float(a.abs().max()))
    passes = {}
    for c in on["calls"]:
        passes.setdefault(c["name"], []).append(c)
    return dict(
        checkpointing=[off["checkpointing"], on["checkpointing"]],
        losses_off=off["losses"],
        losses_on=on["losses"],
        loss_diff=loss_diff,
        param_diff=param_diff,
        param_scale=param_scale,
        update_rel=update_rel,
        vision_update=vision_update,
        grad_diff=grad_diff,
        grad_scale=grad_scale,
        vision_grad_diff=vision_grad_diff,
        vision_grad_scale=vision_grad_scale,
        feature_calls=len(on["features"]),
        feature_diff=feature_diff,
        feature_scale=feature_scale,
        seen_off=sum(off["seen"]),
        seen_on=sum(on["seen"]),
        calls=on["calls"],
        passes=sorted(p for p in passes if p),
        metrics=on["metrics"],
        disabled=bool(on["enabled"]),
    )


def scenario_mismatch(rank, world, group):
    """Process 0 runs its loss forward a row at a time (two model calls, as a retry with a smaller
    batch would), process 1 in one call: in a pass with gradients a process can only join inside a
    forward, so both raise the same FrameshardError, at once."""
    _env(rank, world)

    def chunked(trainer):
        if rank == 0:
            original = trainer._get_per_token_logps_and_entropies

            @functools.wraps(original)
            def one_row_at_a_time(*a, **k):
                if torch.is_grad_enabled():
                    k["batch_size"] = 1
                return original(*a, **k)

            trainer._get_per_token_logps_and_entropies = one_row_at_a_time

    setup = Setup(beta=0.0, steps_per_generation=1, per_device=2)
    with _shared_tmp(group, setup) as tmp:
        start = time.monotonic()
        try:
            run(setup, True, tmp, rank, prepare=chunked)
            message = None
        except Exception as e:  # the error is the result
            message = "%s: %s" % (type(e).__name__, e)
    return dict(message=message, seconds=time.monotonic() - start)


ASSORTED = ((16, 16), (24, 32), (48, 40), (64, 24))

SCENARIOS = {
    # Every pass: generation, old log-probs (steps_per_generation 2), reference (beta), loss.
    "qwen2_vl": parity(Setup()),
    "float64": parity(Setup(dtype=torch.float64)),
    "qwen2_5_vl": parity(Setup(family="qwen2_5_vl", beta=0.0, sizes=ASSORTED)),
    "qwen3_vl": parity(Setup(family="qwen3_vl", beta=0.0, sizes=ASSORTED)),
    # Prompts 1 and 2 have no image: process 1's first batch (prompt 1, twice) and process 0's second.
    "text_only": parity(Setup(per_device=2, generations=2, steps_per_generation=1, text_only=(1, 2), sizes=ASSORTED)),
    "peft": parity(Setup(peft=True, per_device=2)),
    "frozen": parity(Setup(frozen=True, beta=0.0)),
    "pixels": parity(Setup(keys="pixels", beta=0.0)),
    "mismatch": scenario_mismatch,
    "fsdp2": parity(Setup(fsdp2=True, beta=0.0)),  # last: it sets accelerate's shared state
}


if __name__ == "__main__":
    import worker_common

    worker_common.main(SCENARIOS)
