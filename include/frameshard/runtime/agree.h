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
// agree_values is the same for named integer arguments that every rank of
// a collective must pass alike (a sequence length, a CP size, a split):
// where they differ, every rank raises the same error naming the first
// argument that differs and two ranks' values, instead of the collective
// that follows hanging or mixing shapes.
//
//   frameshard::agree_values(group, "context_parallel",
//                            {"seq_len", "cp_size"}, {seq_len, cp});
//
// Collective: every rank of `group` must call it.
#pragma once

#include <frameshard/runtime/process_group.h>

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

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

/// See the banner. Returns on every rank when every rank passed the same
/// `names` and `values`; otherwise raises c10::Error on every rank,
/// prefixed "frameshard::<fn>: [rank r/W] " and the same after it: "ranks
/// disagree on <name>: rank 0 has X, rank k has Y" for the first name (in
/// order) on which some rank differs from rank 0, k the lowest such rank.
/// A rank whose names and values differ in number, or ranks that pass
/// different names, raise alike. One equal-size all-gather when all agree,
/// a second one (of the values) when they do not. `device` and `timeout` as
/// for agree. nullptr or a group of one: only the local check.
void agree_values(
    const ProcessGroupPtr& group,
    const std::string& fn,
    const std::vector<std::string>& names,
    const std::vector<int64_t>& values,
    c10::Device device = c10::Device(c10::kCPU),
    std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

}  // namespace frameshard
