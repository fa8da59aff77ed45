// File: frameshard/frameshard.h
//
// Umbrella header: the planning core (frameshard/core.h) and, when this build
// has them (FRAMESHARD_HAVE_TORCH_LAYERS), the tower contract, the towers and
// the distributed runtime (process groups, the differentiable gather and the
// sharded encode; those calls are collective, see each header).
#pragma once

#include <frameshard/build_config.h>
#include <frameshard/core.h>

#if FRAMESHARD_HAVE_TORCH_LAYERS
#include <frameshard/models/qwen_vision.h>
#include <frameshard/models/safetensors.h>
#include <frameshard/models/toy_tower.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/gather.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/tower.h>
#endif
