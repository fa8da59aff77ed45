#!/usr/bin/env python3
"""Fine-tuning a vision-language model with TRL's SFTTrainer and context parallelism.

    .venv/bin/python -m pip install --no-build-isolation '.[trl]'     # once, from the repo root
    .venv/bin/torchrun --standalone --nproc-per-node 2 examples/python/trl_sft_cp.py
    .venv/bin/accelerate launch --cpu --num_processes 4 examples/python/trl_sft_cp.py --cp 2   # dp 2 x cp 2
    .venv/bin/torchrun --nproc-per-node 8 examples/python/trl_sft_cp.py --model Qwen/Qwen2.5-VL-3B-Instruct --gpu

By default it builds a tiny random Qwen2-VL and a processor from local configs (no download) and
trains on the CPU for --steps steps on conversations about images of assorted sizes. The one
frameshard line, `fs_trl.enable(trainer, config, cp_size=C)`, splits each CP group's sequence
(the language model: hf.context_parallel) and its frames (the tower: hf.enable, each visual row
sent to the rank that holds its token) over C processes; the losses, gradients, logs,
checkpoints and evaluation are those of the same training on W / C processes without CP. `--cp 1`
runs without it (the reference). `--model PATH` trains a real model with its own processor.
"""

import argparse
import logging
import os
import sys

import datasets
import transformers
import trl
from PIL import Image

import frameshard
from frameshard.integrations import trl as fs_trl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trl_grpo  # noqa: E402  (the tiny model and processor)


def conversations(
    count: int = 16, offset: int = 0, sizes: tuple = ((32, 32), (48, 32), (64, 48), (24, 40))
) -> datasets.Dataset:
    """`count` conversations (numbered from `offset`): a user turn with an image of one of `sizes`
    and a question, an assistant answer whose length varies (TRL's conversational vision format:
    a `messages` and an `images` column)."""
    rows = []
    for i in range(offset, offset + count):
        w, h = sizes[i % len(sizes)]
        image = Image.new("RGB", (w, h), (37 * i % 256, 91 * i % 256, 53 * i % 256))
        user = [{"type": "image"}, {"type": "text", "text": "What is shape %d?" % i}]
        answer = [{"type": "text", "text": "Shape %d is %s." % (i, "round" * (1 + i % 3))}]
        rows.append({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
                     "images": [image]})  # fmt: skip
    return datasets.Dataset.from_list(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a model directory or hub name (default: a tiny random Qwen2-VL)")
    parser.add_argument("--cp", type=int, default=2, help="context-parallel size (1: without frameshard)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2, help="per-device batch (rows)")
    parser.add_argument("--gpu", action="store_true", help="train on the GPUs, in bfloat16")
    parser.add_argument("--output-dir", default="trl_sft_cp_out")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("frameshard").setLevel(logging.INFO)

    if args.model:
        model = transformers.AutoModelForImageTextToText.from_pretrained(args.model, attn_implementation="sdpa")
        processor = transformers.AutoProcessor.from_pretrained(args.model)
    else:
        model, processor = trl_grpo.tiny_qwen2_vl(), trl_grpo.tiny_processor()
    processor.tokenizer.padding_side = "right"  # the CP forward is causal: pads must come last
    config = trl.SFTConfig(
        output_dir=args.output_dir,
        use_cpu=not args.gpu,
        bf16=args.gpu,
        per_device_train_batch_size=args.batch,
        max_steps=args.steps,
        max_length=None,  # never cut an image's placeholder tokens
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=conversations(), processing_class=processor)
    # The defaults (gather "owner", frame sharding over 2048 visual tokens); the tiny images need none.
    sharding = frameshard.FrameShardingConfig(enabled=True, gather="owner", min_tokens=0, min_frames=0)
    fs_trl.enable(trainer, sharding, cp_size=args.cp)
    try:
        trainer.train()
    except BaseException:
        frameshard.shut_down(peers_alive=False)
        raise
    if trainer.accelerator.is_main_process:
        for entry in trainer.state.log_history:
            if "loss" in entry:
                print("step %d: loss %.6f, tokens %d" % (entry["step"], entry["loss"], entry.get("num_tokens", 0)))
    fs_trl.disable(trainer)
    frameshard.shut_down()


if __name__ == "__main__":
    main()
