// File: frameshard/frameshard.h
//
// Umbrella header. The planning core (frames, cost, partition, policy, plan,
// config) is torch-free and lives in frameshard::core; the runtime (process
// groups, the differentiable gather, sharded encode) and the towers need
// LibTorch and live in frameshard::frameshard.
#pragma once

#include <frameshard/config.h>
#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/frames.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>
#include <frameshard/policy.h>

#include <frameshard/encode.h>
#include <frameshard/gather.h>
#include <frameshard/process_group.h>
