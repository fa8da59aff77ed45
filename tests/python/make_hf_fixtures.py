#!/usr/bin/env python3
"""Builds tiny random Qwen-VL-family checkpoints, inputs and Hugging Face reference outputs.

Run with the modern-tier venv (scripts/setup-modern.sh), not Debian's python:

    .venv/bin/python tests/python/make_hf_fixtures.py --out DIR [--families qwen2_vl,...]

For each family F it writes (the contract with `frameshard encode`):

  DIR/F/model/                 save_pretrained output: config.json + model.safetensors
                               (the whole tiny model; the language model is tiny too)
  DIR/F/inputs.safetensors     pixel_values float32 [rows, C*T*P*P], rows = sum(t*h*w), in the
                               Qwen processor's row order; grid_thw int64 [n, 3]
  DIR/F/reference.safetensors  embeddings float32 [tokens, out_hidden]: the vision tower's merged
                               output (what get_image_features returns, concatenated);
                               deepstack_0, deepstack_1, ... (Qwen3-VL) in
                               deepstack_visual_indexes order; and debug_* tensors that are not
                               compared but locate a divergence, all float32, all in the input
                               row order (Qwen2.5-VL's window permutation undone):
                                 debug_patch_embed    patch embedding output [rows, hidden]
                                 debug_block_input    input of block 0 (= patch embed + learned
                                                      position embedding for Qwen3-VL/Qwen3.5)
                                 debug_rotary_cos/sin the 2-D rotary tables [rows, head_dim]
                                 debug_block{i}       output of block i [rows, hidden]
  DIR/manifest.json            families written, families skipped (and why), versions, grids

Nemotron Omni (nemotron_h_omni, and nemotron_h_omni_bf16 from a bfloat16 checkpoint) writes the same
three files for the `radio` tower: RADIO's packed patches as inputs (grid_thw rows (1, h, w)), and
the concatenated pooler_output of the model's own get_image_features as `embeddings`.

The reference is the transformers vision tower run in float32 with eager attention. Weights are
re-drawn at unit scale (transformers' init uses std 0.02, which makes attention nearly uniform
and hides rotary or masking bugs): every component then moves the output by O(1).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file

# Images of different sizes (one tall and narrow, one large enough that split_frames cuts it
# across 4 ranks) and a multi-frame video, in merged-patch multiples. With patch 4 and window 16,
# Qwen2.5-VL's 2x2-merged-token windows need padding on the 6x8 and 4x6 grids, and Qwen3-VL's 6x6
# learned position grid is both down- and up-sampled.
GRID_THW = [[1, 4, 4], [1, 6, 8], [4, 4, 6], [1, 10, 2], [1, 16, 16]]

PATCH = 4
TEMPORAL = 2
MERGE = 2
CHANNELS = 3
TEXT_HIDDEN = 48  # = the towers' output width

# The processor's normalisation (OpenAI CLIP mean/std), applied to uniform [0, 1) pixels.
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


def _text_config(extra=None):
    # mrope sections sum to head_dim / 2 = 12; bos/eos inside the tiny vocabulary.
    cfg = dict(
        vocab_size=128,
        hidden_size=TEXT_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        bos_token_id=0,
        eos_token_id=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 4, 4]},
    )
    cfg.update(extra or {})
    return cfg


def _common_vision():
    return dict(
        in_channels=CHANNELS,
        patch_size=PATCH,
        temporal_patch_size=TEMPORAL,
        spatial_merge_size=MERGE,
    )


def family_specs():
    """family -> (config class name, model class name, kwargs for the config)."""
    return {
        "qwen2_vl": (
            "Qwen2VLConfig",
            "Qwen2VLForConditionalGeneration",
            dict(
                text_config=_text_config(),
                vision_config=dict(
                    depth=2,
                    embed_dim=32,
                    hidden_size=TEXT_HIDDEN,
                    num_heads=2,
                    mlp_ratio=2,
                    hidden_act="quick_gelu",
                    **_common_vision(),
                ),
            ),
        ),
        "qwen2_5_vl": (
            "Qwen2_5_VLConfig",
            "Qwen2_5_VLForConditionalGeneration",
            dict(
                text_config=_text_config(),
                vision_config=dict(
                    depth=4,
                    hidden_size=32,
                    intermediate_size=48,
                    num_heads=2,
                    hidden_act="silu",
                    out_hidden_size=TEXT_HIDDEN,
                    # window_size / merge / patch = 2 merged tokens per window side.
                    window_size=16,
                    fullatt_block_indexes=[1, 3],
                    **_common_vision(),
                ),
            ),
        ),
        "qwen3_vl": (
            "Qwen3VLConfig",
            "Qwen3VLForConditionalGeneration",
            dict(
                text_config=_text_config(dict(head_dim=24)),
                vision_config=dict(
                    depth=3,
                    hidden_size=32,
                    intermediate_size=48,
                    num_heads=2,
                    hidden_act="gelu_pytorch_tanh",
                    out_hidden_size=TEXT_HIDDEN,
                    num_position_embeddings=36,
                    deepstack_visual_indexes=[0, 1],
                    **_common_vision(),
                ),
            ),
        ),
        "qwen3_5": (
            "Qwen3_5Config",
            "Qwen3_5ForConditionalGeneration",
            dict(
                text_config=_text_config(
                    dict(
                        num_hidden_layers=2,
                        head_dim=24,
                        layer_types=["linear_attention", "full_attention"],
                        linear_num_key_heads=2,
                        linear_num_value_heads=2,
                        linear_key_head_dim=8,
                        linear_value_head_dim=8,
                        rope_parameters={
                            "rope_type": "default",
                            "rope_theta": 10000.0,
                            "partial_rotary_factor": 1.0,
                            "mrope_section": [4, 4, 4],
                        },
                    )
                ),
                vision_config=dict(
                    depth=3,
                    hidden_size=32,
                    intermediate_size=48,
                    num_heads=2,
                    hidden_act="gelu_pytorch_tanh",
                    out_hidden_size=TEXT_HIDDEN,
                    num_position_embeddings=36,
                    **_common_vision(),
                ),
            ),
        ),
    }


REQUIRED_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")

# Nemotron Omni's vision chain (RADIO, pixel shuffle, projector; the `radio` tower): a float32 and a
# bfloat16 checkpoint of the tiny model of family_models.omni_model, its reference computed in
# float32 from the checkpoint as saved (the bf16 one loaded as float32, as `encode --dtype float32`
# loads it). Its inputs are RADIO's packed patches: per image (h, w) patches row-major, 3 * 4 * 4
# features, grid_thw rows (1, h, w), every side even (the 2 x 2 pixel shuffle).
OMNI_FAMILIES = {"nemotron_h_omni": torch.float32, "nemotron_h_omni_bf16": torch.bfloat16}
OMNI_GRID_HW = [[4, 4], [6, 8], [2, 2], [10, 4], [16, 16]]


def pack_pixels(frames, merge, temporal, patch):
    """Packs raw frames [T_raw, C, H, W] into Qwen processor rows [t*h*w, C*temporal*P*P].

    Same reshape/transposition as Qwen2VLImageProcessor: rows run over (t, h/merge, w/merge,
    merge, merge); features over (C, temporal, P, P). An image is one frame repeated temporal
    times, as the processor does."""
    t_raw, c, height, width = frames.shape
    t, h, w = t_raw // temporal, height // patch, width // patch
    x = frames.reshape(t, temporal, c, h // merge, merge, patch, w // merge, merge, patch)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(x.reshape(t * h * w, c * temporal * patch * patch))


def make_inputs(rng):
    rows = []
    for t, h, w in GRID_THW:
        if t == 1:
            frame = rng.random((1, CHANNELS, h * PATCH, w * PATCH), dtype=np.float32)
            frames = np.repeat(frame, TEMPORAL, axis=0)
        else:
            frames = rng.random((t * TEMPORAL, CHANNELS, h * PATCH, w * PATCH), dtype=np.float32)
        frames = (frames - MEAN[None, :, None, None]) / STD[None, :, None, None]
        rows.append(pack_pixels(frames, MERGE, TEMPORAL, PATCH))
    pixel_values = np.concatenate(rows, axis=0).astype(np.float32)
    grid_thw = np.array(GRID_THW, dtype=np.int64)
    return pixel_values, grid_thw


@torch.no_grad()
def redraw_vision_weights(visual, seed):
    """Unit-scale weights so that attention is far from uniform and every part matters."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(visual.named_parameters()):
        if "pos_embed" in name:  # learned positions as large as the patch embedding
            p.copy_(torch.randn(p.shape, generator=gen))
        elif p.dim() >= 2:
            fan_in = p[0].numel()
            gain = 1.5 if ".qkv." in name else 1.0  # sharper attention
            p.copy_(torch.randn(p.shape, generator=gen) * (gain / fan_in**0.5))
        elif name.endswith(".weight"):  # norm scales
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
        else:  # biases, norm shifts
            p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def window_index_of(visual, grid_thw):
    """Qwen2.5-VL's merged-token window permutation, or None for other towers."""
    if not hasattr(visual, "fullatt_block_indexes"):
        return None
    try:
        from transformers.vision_utils import get_vision_window_index

        index, _ = get_vision_window_index(
            grid_thw,
            spatial_merge_size=visual.spatial_merge_size,
            window_size=visual.window_size,
            patch_size=visual.patch_size,
        )
    except ImportError:  # transformers 4.x
        index, _ = visual.get_window_index(grid_thw)
    return index


def unpermute(x, window_index, unit):
    if window_index is None:
        return x
    rows = x.shape[0]
    inverse = torch.argsort(window_index)
    return x.reshape(rows // unit, unit, -1)[inverse].reshape(rows, -1)


def run_reference(visual, pixel_values, grid_thw):
    """Runs the tower with hooks; returns (tensors to save, pooled embeddings)."""
    captured = {}
    hooks = []

    def keep(name):
        def hook(_module, _inputs, output):
            captured[name] = output

        return hook

    hooks.append(visual.patch_embed.register_forward_hook(keep("patch_embed")))
    hooks.append(visual.rotary_pos_emb.register_forward_hook(keep("rotary")))
    hooks.append(
        visual.blocks[0].register_forward_pre_hook(
            lambda _m, args, kwargs: captured.__setitem__("block_input", args[0] if args else kwargs["hidden_states"]),
            with_kwargs=True,
        )
    )
    for i, blk in enumerate(visual.blocks):
        hooks.append(blk.register_forward_hook(keep("block%d" % i)))
    try:
        out = visual(pixel_values, grid_thw=grid_thw)
    finally:
        for h in hooks:
            h.remove()

    tensors = {"embeddings": out.pooler_output}
    deepstack = getattr(out, "deepstack_features", None) or []
    for i, d in enumerate(deepstack):
        tensors["deepstack_%d" % i] = d

    window_index = window_index_of(visual, grid_thw)
    unit = visual.spatial_merge_size**2
    tensors["debug_patch_embed"] = captured["patch_embed"]
    tensors["debug_block_input"] = unpermute(captured["block_input"], window_index, unit)
    rotary = captured["rotary"]
    if isinstance(rotary, tuple):
        tensors["debug_rotary_cos"], tensors["debug_rotary_sin"] = rotary
    else:  # older transformers: raw angles [rows, head_dim / 2]
        tensors["debug_rotary_freqs"] = rotary
    for i in range(len(visual.blocks)):
        tensors["debug_block%d" % i] = unpermute(captured["block%d" % i], window_index, unit)
    return tensors


def build_family(family, spec, out_dir, pixel_values, grid_thw, seed):
    config_cls, model_cls, kwargs = spec
    config = getattr(transformers, config_cls)(**kwargs)
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)._from_config(config, attn_implementation="eager")
    model.eval()
    visual = model.model.visual
    redraw_vision_weights(visual, seed)

    fam_dir = os.path.join(out_dir, family)
    model_dir = os.path.join(fam_dir, "model")
    model.save_pretrained(model_dir)

    pv = torch.from_numpy(pixel_values)
    grid = torch.from_numpy(grid_thw)
    with torch.no_grad():
        tensors = run_reference(visual, pv, grid)
        # What the model itself feeds the language model must be what we compare against.
        feats = model.model.get_image_features(pixel_values=pv, image_grid_thw=grid)
        pooled = feats.pooler_output if hasattr(feats, "pooler_output") else feats
        if isinstance(pooled, (list, tuple)):
            pooled = torch.cat(list(pooled), dim=0)
        assert torch.equal(pooled, tensors["embeddings"]), family + ": get_image_features != visual(...)"
        # The saved checkpoint (names as save_pretrained writes them) must reproduce the reference.
        reloaded = getattr(transformers, model_cls).from_pretrained(model_dir, attn_implementation="eager")
        reloaded.eval()
        again = reloaded.model.visual(pv, grid_thw=grid).pooler_output
        assert torch.equal(again, tensors["embeddings"]), family + ": reloaded checkpoint differs"

    vcfg = config.vision_config
    tokens = int(sum(t * h * w for t, h, w in GRID_THW)) // MERGE**2
    out_hidden = getattr(vcfg, "out_hidden_size", None) or vcfg.hidden_size
    emb = tensors["embeddings"]
    assert tuple(emb.shape) == (tokens, out_hidden), (family, tuple(emb.shape))
    expected_deepstack = len(getattr(vcfg, "deepstack_visual_indexes", None) or [])
    got_deepstack = sum(1 for k in tensors if k.startswith("deepstack_"))
    assert got_deepstack == expected_deepstack, (family, got_deepstack, expected_deepstack)
    for name, t in tensors.items():
        assert torch.isfinite(t).all(), (family, name)
    # A degenerate reference (constant rows) could not tell a right tower from a wrong one.
    assert float(emb.std(dim=0).min()) > 1e-2, (family, "embeddings nearly constant across tokens")

    save_file({"pixel_values": pixel_values, "grid_thw": grid_thw}, os.path.join(fam_dir, "inputs.safetensors"))
    metadata = {
        "family": family,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "grid_thw": json.dumps(GRID_THW),
    }
    save_file(
        {k: np.ascontiguousarray(v.detach().to(torch.float32).numpy()) for k, v in tensors.items()},
        os.path.join(fam_dir, "reference.safetensors"),
        metadata=metadata,
    )
    shapes = {k: list(v.shape) for k, v in tensors.items() if not k.startswith("debug_")}
    return {"dir": fam_dir, "outputs": shapes, "embeddings_abs_max": float(emb.abs().max())}


def build_omni(family, out_dir, seed):
    """The Nemotron Omni fixture of `family` (OMNI_FAMILIES): model/, inputs and reference."""
    from transformers import NemotronH_Omni_Reasoning_V3

    import family_models

    model = family_models.omni_model(seed).to(OMNI_FAMILIES[family]).eval()
    model_dir = os.path.join(out_dir, family, "model")
    model.save_pretrained(model_dir)
    reloaded = NemotronH_Omni_Reasoning_V3.from_pretrained(
        model_dir, attn_implementation="eager", dtype=torch.float32
    ).eval()
    grid_hw = torch.tensor(OMNI_GRID_HW)
    pixel_values = family_models.pixels(grid_hw, family_models.OMNI_FEATURES, seed).float()
    with torch.no_grad():
        pooled = reloaded.get_image_features(pixel_values=pixel_values, image_grid_hw=grid_hw).pooler_output
    emb = torch.cat(list(pooled))
    assert tuple(emb.shape) == (int(grid_hw.prod(-1).sum()) // 4, reloaded.config.text_config.hidden_size)
    assert torch.isfinite(emb).all() and float(emb.std(dim=0).min()) > 1e-2, family
    grid_thw = torch.cat([torch.ones_like(grid_hw[:, :1]), grid_hw], dim=1)
    fam_dir = os.path.join(out_dir, family)
    save_file(
        {"pixel_values": pixel_values.numpy(), "grid_thw": grid_thw.numpy()},
        os.path.join(fam_dir, "inputs.safetensors"),
    )
    metadata = {"family": family, "transformers": transformers.__version__, "torch": torch.__version__}
    save_file({"embeddings": emb.numpy()}, os.path.join(fam_dir, "reference.safetensors"), metadata=metadata)
    return {"dir": fam_dir, "outputs": {"embeddings": list(emb.shape)}, "embeddings_abs_max": float(emb.abs().max())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    names = list(family_specs()) + list(OMNI_FAMILIES)
    parser.add_argument(
        "--families",
        default=",".join(names),
        help="comma-separated subset of: " + ", ".join(names),
    )
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)

    torch.set_num_threads(min(2, torch.get_num_threads()))
    transformers.utils.logging.disable_progress_bar()
    specs = family_specs()
    wanted = [f for f in args.families.split(",") if f]
    unknown = [f for f in wanted if f not in specs and f not in OMNI_FAMILIES]
    if unknown:
        parser.error("unknown families: " + ", ".join(unknown))

    os.makedirs(args.out, exist_ok=True)
    pixel_values, grid_thw = make_inputs(np.random.default_rng(args.seed))
    manifest = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "grid_thw": GRID_THW,
        "families": {},
        "skipped": {},
    }
    for family in names:
        if family not in wanted:
            manifest["skipped"][family] = "not requested (--families)"
    for i, family in enumerate(wanted):
        if family in OMNI_FAMILIES:
            manifest["families"][family] = info = build_omni(family, args.out, args.seed + i)
            print("make_hf_fixtures: %-11s %s" % (family, info["outputs"]))
            continue
        config_cls, model_cls, _ = specs[family]
        if not hasattr(transformers, config_cls) or not hasattr(transformers, model_cls):
            if family in REQUIRED_FAMILIES:
                sys.exit("make_hf_fixtures: transformers %s lacks %s" % (transformers.__version__, model_cls))
            manifest["skipped"][family] = "transformers %s has no %s" % (transformers.__version__, model_cls)
            print("make_hf_fixtures: skip %s (%s)" % (family, manifest["skipped"][family]))
            continue
        info = build_family(family, specs[family], args.out, pixel_values, grid_thw, args.seed + i)
        manifest["families"][family] = info
        print("make_hf_fixtures: %-11s %s" % (family, " ".join("%s%s" % kv for kv in info["outputs"].items())))
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
