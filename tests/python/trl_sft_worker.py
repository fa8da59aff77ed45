#!/usr/bin/env python3
"""One process of test_trl_sft.py: TRL's SFTTrainer (and a plain transformers Trainer) on a tiny
random Qwen2-VL, with frameshard's context parallelism (frameshard.integrations.trl.enable with
cp_size) and without it, on Gloo processes (DDP through accelerate, as the trainers set it up).

    python trl_sft_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

A scenario `<kind>_cp<C>` trains at world W with CP groups of C processes (C 1: without
frameshard, the reference), so dp = W / C. The test launches worlds 1, 2 and 4 and compares the
run of dp D x cp 2 with the run of D processes without CP: per-step losses, the parameters after
3 steps (plain SGD: a gradient of the wrong scale moves them), TRL's metrics, evaluate(), and
what each rank's decoder and tower ran.
"""

import contextlib
import dataclasses
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))

import worker_common  # noqa: E402
from trl_worker import _env, _fsdp2  # noqa: E402


@dataclasses.dataclass
class Setup:
    kind: str = "sft"  # "sft" (trl.SFTTrainer) or "trainer" (transformers.Trainer)
    cp: int = 1
    peft: bool = False
    fsdp2: bool = False
    resume: bool = False  # train 2 steps, save, resume from the checkpoint for the 3rd
    # The Trainer's token count (num_items_in_batch, gathered over all processes) and its loss
    # factor num_processes, as for a model that accepts loss kwargs (Qwen2-VL does not).
    accepts: bool = False
    accelerate_cp: bool = False  # accelerate's ParallelismConfig(cp_size) declared, taken over


def _model():
    import hf_models

    model, _, _ = hf_models.build("qwen2_vl")
    model.config.text_config.pad_token_id = 0
    model.config.text_config._attn_implementation = "sdpa"  # the CP attention runs SDPA
    return model


def _config(setup, out, **fields):
    common = dict(
        output_dir=out,
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=3,
        # Plain SGD without clipping: each update is -lr * the gradient (AdamW would hide a scale).
        optim="sgd",
        learning_rate=0.5,
        max_grad_norm=0.0,
        weight_decay=0.0,
        lr_scheduler_type="constant",
        logging_steps=1,
        report_to="none",
        save_strategy="steps" if setup.resume else "no",
        save_steps=2,
        disable_tqdm=True,
        seed=5,
        remove_unused_columns=False,
        **fields,
    )
    if setup.kind == "sft":
        import trl

        return trl.SFTConfig(max_length=None, gradient_checkpointing=True, **common)
    import transformers

    return transformers.TrainingArguments(**common)


def _collator(processor):
    """The plain Trainer's collator: right-padded rows, labels -100 on the padding."""

    def collate(rows):
        texts = [processor.apply_chat_template(r["messages"], tokenize=False) for r in rows]
        batch = processor(text=texts, images=[i for r in rows for i in r["images"]], padding=True, return_tensors="pt")
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        return batch

    return collate


def _logits_only(logits, _labels):
    return logits[0] if isinstance(logits, tuple) else logits


def _trainer(setup, out, **fields):
    import transformers
    import trl
    import trl_grpo
    import trl_sft_cp

    processor = trl_grpo.tiny_processor("qwen2_vl")
    processor.tokenizer.padding_side = "right"
    train = trl_sft_cp.conversations(12)
    evaluation = trl_sft_cp.conversations(5, offset=100)
    args = _config(setup, out, **fields)
    peft_config = None
    if setup.peft:
        import peft

        peft_config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "qkv"])
    if setup.kind == "sft":
        return trl.SFTTrainer(model=_model(), args=args, train_dataset=train, eval_dataset=evaluation,
                              processing_class=processor, peft_config=peft_config)  # fmt: skip
    # predict() keeps the logits: the model's outputs also hold the tower's, of other sizes on
    # each process, which the Trainer cannot gather.
    return transformers.Trainer(model=_model(), args=args, train_dataset=train, eval_dataset=evaluation,
                                data_collator=_collator(processor),
                                preprocess_logits_for_metrics=_logits_only)  # fmt: skip


def _watch(trainer, seen):
    """Per forward: the rows this rank's decoder ran of the sequence, and its tower's patch rows
    of the batch's."""
    from frameshard.hf import _patches
    from frameshard.integrations import _cp_trainer

    base = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    visual = base.model.visual
    visual.register_forward_pre_hook(
        lambda _m, a, k: seen["tower_total"].append(int((a[1] if len(a) > 1 else k["grid_thw"]).prod(-1).sum())),
        with_kwargs=True,
    )  # noqa: E501
    visual.patch_embed.register_forward_pre_hook(lambda _m, a: seen["tower_local"].append(int(a[0].shape[0])))
    session = _patches.state(trainer, _cp_trainer.OWNER)
    if session is not None:

        def after(_m, _a, _out):
            fwd = session.cp._state.last
            seen["decoder"].append([int(fwd.positions.numel()), int(fwd.seq_len)])

        session.cp.language_model.register_forward_hook(after)


def _params(trainer):
    out = {}
    for n, p in trainer.model.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[n] = full.detach().double().flatten().tolist()
    return out


def _train(setup, trainer, out):
    with _fsdp2(trainer) if setup.fsdp2 else contextlib.nullcontext():
        if not setup.resume:
            return trainer.train()
        trainer.args.max_steps = 2  # stop after the checkpoint of step 2
        trainer.train()
        trainer.args.max_steps = 3
        return trainer.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))


def run(setup):
    def scenario(rank, world, group):
        _env(rank, world)
        with worker_common.shared_tmp(group) as tmp:
            out = os.path.join(tmp, "out")
            trainer = _trainer(setup, out)
            if setup.accepts:
                trainer.model_accepts_loss_kwargs = True
            with _parallelism_config(trainer, setup):
                result = _run(setup, trainer, out, rank)
        return result

    return scenario


@contextlib.contextmanager
def _parallelism_config(trainer, setup):
    """accelerate's ParallelismConfig(cp_size) on the trainer's accelerator state when the setup
    asks (accelerate's CP runs only on CUDA with FSDP2, so the config is set after the trainer
    is built; the trainer's own CP code paths read it), restored after."""
    if not setup.accelerate_cp:
        yield
        return
    from accelerate import ParallelismConfig

    state = trainer.accelerator.state
    before = state.parallelism_config, state.device_mesh
    state.parallelism_config = ParallelismConfig(cp_size=setup.cp, dp_shard_size=dist.get_world_size() // setup.cp)
    state.device_mesh = state.parallelism_config.build_device_mesh("cpu")  # as accelerate builds it
    try:
        yield
    finally:
        state.parallelism_config, state.device_mesh = before


def _run(setup, trainer, out, rank):
    """One training (see the module docstring) of `trainer`; its record."""
    from frameshard.integrations import trl as fs_trl

    if setup.cp > 1:
        config = frameshard.FrameShardingConfig(
            enabled=True, gather="owner", min_tokens=0, min_frames=0, min_local_patch_rows=0
        )
        fs_trl.enable(trainer, config, cp_size=setup.cp)
    seen = {"decoder": [], "tower_total": [], "tower_local": []}
    _watch(trainer, seen)
    torch.manual_seed(11)
    _train(setup, trainer, out)
    logs = [e for e in trainer.state.log_history if "loss" in e]
    metrics = trainer.evaluate()
    params = _params(trainer)  # collective under FSDP2 (full_tensor)
    result = dict(
        losses=[e["loss"] for e in logs],
        logged=logs[-1],
        eval=metrics,
        params=params if rank == 0 else None,
        checkpointing=bool(getattr(trainer.model, "is_gradient_checkpointing", False)),
        **seen,
    )
    if setup.resume and rank == 0:  # the checkpoint the run resumed from: whole tensors
        from safetensors.torch import load_file

        saved = load_file(os.path.join(out, "checkpoint-2", "model.safetensors"))
        result["checkpoint"] = {k: v.double().flatten().tolist() for k, v in saved.items()}
    if setup.kind == "trainer":
        predicted = trainer.predict(trainer.eval_dataset)
        logits = torch.as_tensor(predicted.predictions)
        real = torch.as_tensor(predicted.label_ids) != -100  # pads' logits are the CP path's own
        result.update(predict_shape=list(logits.shape), predict_sum=float(logits[real].double().abs().sum()))
    result["enabled"] = fs_trl.disable(trainer)
    return result


import frameshard  # noqa: E402

SCENARIOS = {}
for _cp in (1, 2):
    SCENARIOS["sft_cp%d" % _cp] = run(Setup(cp=_cp))
    SCENARIOS["trainer_cp%d" % _cp] = run(Setup(kind="trainer", cp=_cp))
    SCENARIOS["peft_cp%d" % _cp] = run(Setup(cp=_cp, peft=True))
    SCENARIOS["resume_cp%d" % _cp] = run(Setup(cp=_cp, resume=True))
    SCENARIOS["fsdp2_cp%d" % _cp] = run(Setup(cp=_cp, fsdp2=True))
    SCENARIOS["accepts_cp%d" % _cp] = run(Setup(cp=_cp, accepts=True))
SCENARIOS["accelerate_cp2"] = run(Setup(cp=2, accepts=True, accelerate_cp=True))


def default(world):
    """World 1: the references of dp 1; world 2: dp 1 x cp 2 and the references of dp 2;
    world 4: dp 2 x cp 2."""
    cps = {1: (1,), 2: (1, 2), 4: (2,)}[world]
    return [name for name in SCENARIOS if int(name.rsplit("cp", 1)[1]) in cps]


if __name__ == "__main__":
    worker_common.main(SCENARIOS, default)
