// File: frameshard/core.h
//
// Umbrella header of the torch-free planning core (frameshard::core): frames,
// cost models, partitioners, policy, plans, config and workloads. Includes no
// LibTorch header; nothing here is collective.
//
// Usage:
//   #include <frameshard/core.h>
//   frameshard::PlanOptions o;
//   o.world = 4;
//   frameshard::ShardPlan plan = frameshard::make_plan(grid, o);
#pragma once

#include <frameshard/analyze.h>
#include <frameshard/calibrate.h>
#include <frameshard/config.h>
#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/frames.h>
#include <frameshard/media_manifest.h>
#include <frameshard/media_resize.h>
#include <frameshard/online_cost.h>
#include <frameshard/owner_route.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>
#include <frameshard/policy.h>
#include <frameshard/splitmix64.h>
#include <frameshard/workload.h>
#include <frameshard/xml.h>
