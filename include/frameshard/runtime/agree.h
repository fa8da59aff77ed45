// File: frameshard/runtime/agree.h
//
// "Go on together or fail together" outside frameshard::encode: every rank
// of a group states whether its local work succeeded and a fingerprint of
// what must be the same everywhere (e.g. a hash of the config it runs);
// agree returns on every rank when all succeeded with equal fingerprints and
// otherwise raises the same error on every rank (which rank failed and why,
// or which fingerprints differ), instead of leaving the healthy ranks
// blocked in their next collective. It is encode's consensus step (one
// small equal-size all-gather) with no plan.
//
// Usage:
//   std::exception_ptr err;
//   try { setup(); } catch (...) { err = std::current_exception(); }
//   frameshard::agree(group, config_hash, err, "train", "config");
//
// Collective: every rank of `group` must call it.
#pragma once

#include <frameshard/runtime/process_group.h>

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <exception>

namespace frameshard {

/// See the banner. `subject` names what `fingerprint` is of in the error
/// ("config"); `device` holds the exchanged buffer (CPU for Gloo, the
/// current CUDA device for NCCL). A timeout of 0 uses the group's default.
void agree(
    const ProcessGroupPtr& group,
    uint64_t fingerprint,
    const std::exception_ptr& local_error,
    const char* fn,
    const char* subject,
    c10::Device device = c10::Device(c10::kCPU),
    std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

}  // namespace frameshard
