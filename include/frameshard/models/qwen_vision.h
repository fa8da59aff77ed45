// File: frameshard/models/qwen_vision.h
//
// Everything for the vision towers (the Qwen-VL families and Nemotron Omni's
// RADIO), one header per job:
//   qwen_config.h   the family configs and QwenVisionConfig (a variant)
//   hf_config.h     config.json <-> QwenVisionConfig (one table per family)
//   cost_bridge.h   config -> the planner's cost dimensions and layout
//   qwen_towers.h   the Qwen tower modules (LibTorch, HF-exact numerics)
//   radio_tower.h   RADIO + pixel shuffle + projector (Nemotron Omni)
//   hf_weights.h    checkpoint tensors <-> module parameters, by HF name
//   qwen_factory.h  QwenVisionModel: make_qwen_vision, load_qwen_vision
//   safetensors.h   the checkpoint file format
//
// Usage:
//   auto model = frameshard::models::load_qwen_vision("/ckpt/Qwen3-VL-8B");
//   std::vector<at::Tensor> outs = model.tower(input);  // TowerInput
//   // or sharded over a CP group:
//   frameshard::EncodeOptions o;
//   o.plan.world = cp_size;
//   o.plan.layout = frameshard::models::media_layout(model.config);
//   o.plan.cost = frameshard::flop_cost_model(
//       frameshard::models::tower_dims(model.config));
//   auto res = frameshard::encode(model.tower, pixels, grid_thw, pg, o);
#pragma once

#include <frameshard/models/cost_bridge.h>
#include <frameshard/models/hf_config.h>
#include <frameshard/models/hf_weights.h>
#include <frameshard/models/qwen_config.h>
#include <frameshard/models/qwen_factory.h>
#include <frameshard/models/qwen_towers.h>
#include <frameshard/models/radio_tower.h>
#include <frameshard/models/safetensors.h>
