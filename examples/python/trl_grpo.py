#!/usr/bin/env python3
"""GRPO on a vision-language model with TRL, each distinct image encoded once across all processes.

    .venv/bin/python -m pip install --no-build-isolation '.[trl]'     # once, from the repo root
    .venv/bin/torchrun --standalone --nproc-per-node 2 examples/python/trl_grpo.py
    .venv/bin/accelerate launch --cpu --num_processes 2 examples/python/trl_grpo.py
    .venv/bin/torchrun --nproc-per-node 8 examples/python/trl_grpo.py --model Qwen/Qwen2.5-VL-3B-Instruct --gpu

By default it builds a tiny random Qwen2-VL and a processor from local configs (no download) and
trains on the CPU for --steps steps: prompts with images of assorted sizes, each sampled
--num-generations times (TRL's GRPOTrainer repeats the prompt, and its images, in every copy).
`fs_trl.enable(trainer)` is the one frameshard line: every vision pass then encodes each distinct
image once across the processes. The script prints, on process 0, the vision rows the towers
encoded against what they would have encoded (TRL's logged metrics frameshard/vision_rows_*).
`--model PATH` trains a real model (a local directory or a hub name) with its own processor.
`--no-frameshard` runs the same without it.
"""

import argparse
import logging
import string
import tempfile
from typing import Any

import datasets
import tokenizers
import torch
import transformers
import trl
from PIL import Image

import frameshard
from frameshard.integrations import trl as fs_trl

# The tiny processor's vocabulary: Qwen's special tokens first (their ids are the tiny model's),
# then one token per printable character.
SPECIAL = ["<|endoftext|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|video_pad|>", "<|vision_end|>"]
SPECIAL += ["<|im_start|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Processor classes of the tiny processors: (processor, video processor).
PROCESSORS = {
    "qwen2_vl": ("Qwen2VLProcessor", "Qwen2VLVideoProcessor"),
    "qwen2_5_vl": ("Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor"),
    "qwen3_vl": ("Qwen3VLProcessor", "Qwen3VLVideoProcessor"),
}


def tiny_processor(family: str = "qwen2_vl", patch: int = 4, max_pixels: int = 64 * 64) -> transformers.ProcessorMixin:
    """A character-level tokenizer with Qwen's special tokens, the family's processor classes at
    patch `patch`, merge 2, temporal patch 2, and images of 8 x 8 pixels to `max_pixels`."""
    vocab = {t: i for i, t in enumerate(SPECIAL)}
    for c in string.printable:
        if c not in "\t\r\x0b\x0c":
            vocab.setdefault(c, len(vocab))
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), "isolated")
    tok.decoder = tokenizers.decoders.Fuse()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL[2:]})
    geometry = dict(patch_size=patch, merge_size=2, temporal_patch_size=2)
    images = transformers.Qwen2VLImageProcessor(**geometry, min_pixels=8 * 8, max_pixels=max_pixels)
    processor, video = (getattr(transformers, name) for name in PROCESSORS[family])
    return processor(
        image_processor=images, tokenizer=tokenizer, video_processor=video(**geometry), chat_template=CHAT_TEMPLATE
    )


def tiny_qwen2_vl(
    seed: int = 0, width: int = 32, depth: int = 2, heads: int = 2, mlp_ratio: int = 2, hidden: int = 48
) -> transformers.Qwen2VLForConditionalGeneration:
    """A random Qwen2-VL at tiny sizes whose token ids match tiny_processor's: a vision tower
    `width` wide, `depth` blocks deep (patch 4, merge 2), and a one-layer language model `hidden`
    wide (2 heads; the three M-RoPE sections fill half a head)."""
    half = hidden // 4
    config = transformers.Qwen2VLConfig(
        text_config=dict(
            vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, bos_token_id=None, eos_token_id=1, pad_token_id=0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "mrope_section": [half - 2 * (half // 3), half // 3, half // 3]},
        ),
        vision_config=dict(
            depth=depth, embed_dim=width, hidden_size=hidden, num_heads=heads, mlp_ratio=mlp_ratio, in_channels=3,
            patch_size=4, temporal_patch_size=2, spatial_merge_size=2,
        ),
        vision_start_token_id=2, vision_end_token_id=5, image_token_id=3, video_token_id=4,
    )  # fmt: skip
    torch.manual_seed(seed)  # the same weights on every process
    return transformers.Qwen2VLForConditionalGeneration._from_config(config, attn_implementation="eager")


def prompts(count: int = 16, sizes: tuple = ((16, 16), (24, 32), (48, 40), (64, 24)), text_only: tuple = ()):
    """`count` prompts, each with one image of one of `sizes` (width, height; colours differ by
    prompt) but those whose index is in `text_only` (an `images` column, [] for those)."""
    rows = []
    for i in range(count):
        w, h = sizes[i % len(sizes)]
        image = Image.new("RGB", (w, h), (37 * i % 256, 91 * i % 256, 53 * i % 256))
        has_image = i not in text_only
        content = ([{"type": "image"}] if has_image else []) + [{"type": "text", "text": "Name shape %d." % i}]
        rows.append({"prompt": [{"role": "user", "content": content}], "images": [image] if has_image else []})
    return datasets.Dataset.from_list(rows)


def vowel_reward(completions, **_kwargs):
    """A reward with spread inside every group: the vowels of the completion."""
    return [float(sum(ch in "aeiouAEIOU" for ch in c[0]["content"])) for c in completions]


def token_reward(completion_ids, **_kwargs):
    """A reward that differs between random completions of a tiny model: its token ids mod 13."""
    return [float(sum(ids) % 13) for ids in completion_ids]


def grpo_config(output_dir: str, gpu: bool = False, **fields: Any) -> trl.GRPOConfig:
    """A GRPOConfig that logs each step to the console only and saves nothing (bf16 on a GPU,
    float32 on the CPU); `fields`: the run's own (batch, generations, steps, ...)."""
    return trl.GRPOConfig(
        output_dir=output_dir,
        use_cpu=not gpu,
        bf16=gpu,
        log_multimodal=False,  # TRL gathers images only on processes that have some (a hang otherwise)
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        **fields,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a model directory or hub name (default: a tiny random Qwen2-VL)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4, help="per-device batch (rows)")
    parser.add_argument("--beta", type=float, default=0.04, help="KL weight: > 0 runs the reference model too")
    parser.add_argument("--gpu", action="store_true", help="train on the GPUs, in bfloat16")
    parser.add_argument("--keys", default="groups", choices=fs_trl.KEYS, help="how copies are found")
    parser.add_argument("--no-frameshard", action="store_true")
    parser.add_argument("--output-dir", default="trl_grpo_out")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("frameshard").setLevel(logging.INFO)

    tmp = tempfile.TemporaryDirectory(prefix="trl_grpo_")
    if args.model:
        model, processor = args.model, transformers.AutoProcessor.from_pretrained(args.model, padding_side="left")
        reward = vowel_reward
    else:
        # A directory, as a hub model would be: TRL builds the reference model (beta > 0) from it.
        model = tmp.name
        tiny_qwen2_vl().save_pretrained(model)
        processor, reward = tiny_processor(), token_reward
    config = grpo_config(
        args.output_dir,
        args.gpu,
        per_device_train_batch_size=args.batch,
        num_generations=args.num_generations,
        max_completion_length=16 if args.model else 8,
        max_steps=args.steps,
        beta=args.beta,
    )
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=prompts(), processing_class=processor
    )
    if not args.no_frameshard:
        fs_trl.enable(trainer, keys=args.keys)  # frameshard.integrations.trl.grpo_config() defaults
    try:
        trainer.train()
    except BaseException:
        frameshard.shut_down(peers_alive=False)
        raise
    if trainer.accelerator.is_main_process:
        for entry in trainer.state.log_history:
            if "loss" in entry:
                rows = entry.get("frameshard/vision_rows_distinct"), entry.get("frameshard/vision_rows_total")
                print(
                    "step %d: loss %.6f, vision rows encoded %s of %s"
                    % (entry["step"], entry["loss"], *("%d" % r if r is not None else "-" for r in rows))
                )
    frameshard.shut_down()
    tmp.cleanup()


if __name__ == "__main__":
    main()
