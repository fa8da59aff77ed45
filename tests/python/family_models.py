"""Tiny random transformers GLM-4V and Nemotron Omni models for test_families.py (no downloads:
the configs are built here, the weights drawn at unit scale as for the Qwen fixtures).

GLM-4V: Glm4vForConditionalGeneration (glm4v) and the GLM-4.5V vision module alone
(Glm4vMoeVisionModel, glm4v_moe), patch 4, a 4 x 4 learned position grid (interpolated to every
image's size), merge 2, width 32, 2 blocks. Nemotron Omni: NemotronH_Omni_Reasoning_V3 with a
2-block RADIO (patch 4, 2 cls + 3 register tokens), the final LayerNorm (built when the language
model has an MTP layer), the projector and a one-layer attention-only NemotronH language model.
PaddleOCR-VL: PaddleOCRVLForConditionalGeneration, a 2-block vision model (patch 4, a 4 x 4
position grid), the projector and a one-layer language model.

TRAIN_FAMILIES x TRAINING: the training scenarios of families_worker.py (world 2), named
"<training>:<family>" (here, not in the worker, so that test_families.py can list them).
"""

import torch

from make_hf_fixtures import redraw_vision_weights

TEXT = 10  # a text token id inside the tiny vocabularies
GLM_TOKENS = dict(
    image_token_id=3, video_token_id=4, image_start_token_id=5, image_end_token_id=6,
    video_start_token_id=7, video_end_token_id=8,
)  # fmt: skip
GLM_VISION = dict(
    depth=2, hidden_size=32, num_heads=2, intermediate_size=40, out_hidden_size=24, patch_size=4,
    image_size=16, temporal_patch_size=2, spatial_merge_size=2, in_channels=3,
)  # fmt: skip
GLM_FEATURES = 3 * 2 * 4 * 4
GLM_GRID = [[1, 4, 6], [1, 2, 2], [1, 6, 4], [1, 8, 8], [1, 4, 4]]  # five images, 33 image tokens
OMNI_IMAGE_TOKEN = 3
OMNI_PREFIX = 2 + 3  # cls + register tokens per image
OMNI_FEATURES = 3 * 4 * 4

# How trainers hold the models (families_worker.scenario_training): DistributedDataParallel of the
# whole model, FSDP2 fully_shard (vision blocks, vision part, whole model), torch.compile (eager
# backend; aot_eager only when named), HF gradient checkpointing, bf16 parameters.
TRAIN_FAMILIES = ("glm4v", "omni", "paddleocr")
TRAINING = ("ddp", "fsdp2", "compile", "compile_aot_eager", "hf_ckpt", "bf16")


def _unit_scale(module, seed):
    redraw_vision_weights(module, seed)
    with torch.no_grad():  # RADIO's 3-d position table and prefix tokens: O(1) too
        gen = torch.Generator().manual_seed(seed + 1)
        for name, p in module.named_parameters():
            if name.endswith(("position_embedding", "cls_register_token")):
                p.copy_(torch.randn(p.shape, generator=gen))


def pixels(grid, features, seed=5):
    """Random float64 pixel rows for `grid` ([n, 2] or [n, 3], rows = sum of the products)."""
    gen = torch.Generator().manual_seed(seed)
    rows = int(torch.as_tensor(grid).prod(-1).sum())
    return torch.randn(rows, features, generator=gen, dtype=torch.float64)


def glm4v_model(seed=1234):
    """(Glm4vForConditionalGeneration, its vision module), float64, eager attention."""
    from transformers.models.glm4v import Glm4vConfig, Glm4vForConditionalGeneration

    text = dict(
        vocab_size=64, hidden_size=24, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 2, 2]),
    )  # fmt: skip
    config = Glm4vConfig(vision_config=GLM_VISION, text_config=text, **GLM_TOKENS)
    torch.manual_seed(seed)
    model = Glm4vForConditionalGeneration._from_config(config, attn_implementation="eager")
    _unit_scale(model.model.visual, seed)
    return model.double(), model.model.visual


def glm4v_moe_vision(seed=1234):
    """The GLM-4.5V vision module alone (Glm4vMoeVisionModel), float64, eager attention."""
    from transformers.models.glm4v_moe import Glm4vMoeVisionConfig, Glm4vMoeVisionModel

    config = Glm4vMoeVisionConfig(**GLM_VISION)
    torch.manual_seed(seed)
    visual = Glm4vMoeVisionModel._from_config(config, attn_implementation="eager")
    _unit_scale(visual, seed)
    return visual.double()


def glm4v_prompt(grid_thw, merge=2):
    """input_ids and mm_token_type_ids: for each image a text token, <image_start>, its image
    tokens, <image_end>."""
    ids = []
    for i, (t, h, w) in enumerate(torch.as_tensor(grid_thw).tolist()):
        ids += [TEXT + i, GLM_TOKENS["image_start_token_id"]]
        ids += [GLM_TOKENS["image_token_id"]] * (t * h * w // merge**2)
        ids += [GLM_TOKENS["image_end_token_id"]]
    ids = torch.tensor([ids + [TEXT]], dtype=torch.int64)
    return ids, (ids == GLM_TOKENS["image_token_id"]).to(torch.int64)


def omni_model(seed=1234):
    """A NemotronH_Omni_Reasoning_V3, float64, eager attention."""
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3
    from transformers.models.nemotron_h_omni.configuration_nemotron_h_omni import (
        NemotronH_Omni_Reasoning_V3_Config,
    )

    vision = dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=4, max_img_size=32,
        num_cls_tokens=2, num_registers=3, video_temporal_patch_size=2,
    )  # fmt: skip
    text = dict(
        vocab_size=64, hidden_size=32, layers_block_type=["attention"], num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=64, num_nextn_predict_layers=1,
        mtp_layers_block_type=["attention"],
    )  # fmt: skip
    config = NemotronH_Omni_Reasoning_V3_Config(
        vision_config=vision, text_config=text, projector_hidden_size=48, vision_hidden_size=32,
        image_token_id=OMNI_IMAGE_TOKEN, video_token_id=4,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = NemotronH_Omni_Reasoning_V3._from_config(config, attn_implementation="eager")
    for part in (model.vision_model, model.vision_final_layernorm, model.multi_modal_projector):
        _unit_scale(part, seed)
    return model.double()


def omni_prompt(grid_hw):
    """input_ids: for each image a text token and its h * w / 4 image tokens."""
    ids = []
    for i, (h, w) in enumerate(torch.as_tensor(grid_hw).tolist()):
        ids += [TEXT + i] + [OMNI_IMAGE_TOKEN] * (h * w // 4)
    return torch.tensor([ids + [TEXT]], dtype=torch.int64)


PADDLE_TOKENS = dict(image_token_id=3, video_token_id=4, vision_start_token_id=5, vision_end_token_id=6)


def paddleocr_model(seed=1234):
    """A PaddleOCRVLForConditionalGeneration, float64, eager attention; its pixel rows are
    [patches, 3, 4, 4]."""
    from transformers.models.paddleocr_vl import PaddleOCRVLConfig, PaddleOCRVLForConditionalGeneration

    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=16,
        patch_size=4, spatial_merge_size=2,
    )  # fmt: skip
    text = dict(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3]),
    )  # fmt: skip
    config = PaddleOCRVLConfig(vision_config=vision, text_config=text, **PADDLE_TOKENS)
    torch.manual_seed(seed)
    model = PaddleOCRVLForConditionalGeneration._from_config(config, attn_implementation="eager")
    for part in (model.model.visual, model.model.projector):
        _unit_scale(part, seed)
    return model.double()


def paddleocr_prompt(grid_thw):
    """input_ids and mm_token_type_ids: per image a text token, <vision_start>, its image
    tokens, <vision_end>."""
    ids = []
    for i, (t, h, w) in enumerate(torch.as_tensor(grid_thw).tolist()):
        ids += [TEXT + i, PADDLE_TOKENS["vision_start_token_id"]]
        ids += [PADDLE_TOKENS["image_token_id"]] * (t * h * w // 4)
        ids += [PADDLE_TOKENS["vision_end_token_id"]]
    ids = torch.tensor([ids + [TEXT]], dtype=torch.int64)
    return ids, (ids == PADDLE_TOKENS["image_token_id"]).to(torch.int64)
