// Checkpoint tensors <-> tower parameters by Hugging Face name (see
// frameshard/models/hf_weights.h): every mismatch is collected first and
// reported in one error, then everything is copied.
#include <frameshard/models/hf_weights.h>

#include "tower/check.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

namespace frameshard {
namespace models {

namespace {

constexpr const char* kLoadFn = "load_vision_weights";

std::string sizes_text(at::IntArrayRef shape) {
  std::ostringstream os;
  os << shape;
  return os.str();
}

// "a, b, c and 4 more".
std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::ostringstream os;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) {
    os << (i ? ", " : "") << names[i];
  }
  if (names.size() > kShown) {
    os << " and " << names.size() - kShown << " more";
  }
  return os.str();
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// HF saves the tower as "model.visual." (transformers >= 4.52) or
// "visual." (earlier releases and the original checkpoints).
std::string detect_prefix(
    const std::vector<std::string>& names,
    const SafetensorsCheckpoint& ckpt,
    const std::string& what) {
  int64_t nested = 0, flat = 0;
  for (const auto& n : names) {
    nested += starts_with(n, "model.visual.");
    flat += starts_with(n, "visual.");
  }
  FRAMESHARD_TORCH_CHECK(
      !(nested > 0 && flat > 0),
      kLoadFn,
      "expected the ",
      what,
      " under one prefix in ",
      ckpt.source(),
      ", got both \"model.visual.\" (",
      nested,
      " tensors) and \"visual.\" (",
      flat,
      " tensors); pass QwenLoadOptions::prefix");
  FRAMESHARD_TORCH_CHECK(
      nested > 0 || flat > 0,
      kLoadFn,
      "expected tensors named \"model.visual.*\" or \"visual.*\" (the ",
      what,
      ") in ",
      ckpt.source(),
      ", got none among its ",
      names.size(),
      " tensors",
      names.empty() ? std::string() : " (" + name_list(names) + ")");
  return nested > 0 ? "model.visual." : "visual.";
}

// What does not match between the checkpoint and the parameters.
struct Mismatches {
  std::vector<std::string> missing, unexpected, misshaped, bad_dtype;

  bool empty() const {
    return missing.empty() && unexpected.empty() && misshaped.empty() &&
           bad_dtype.empty();
  }
  // "1 missing: a; 2 unexpected: b, c".
  std::string text() const {
    std::ostringstream os;
    const char* sep = "";
    auto part = [&](const std::vector<std::string>& v, const char* label) {
      if (!v.empty()) {
        os << sep << v.size() << " " << label << ": " << name_list(v);
        sep = "; ";
      }
    };
    part(missing, "missing");
    part(unexpected, "unexpected");
    part(misshaped, "mis-shaped");
    part(bad_dtype, "not F64/F32/F16/BF16");
    return os.str();
  }
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool any_of(
    const std::vector<std::string>& list,
    const std::function<bool(const std::string&)>& pred) {
  return std::any_of(list.begin(), list.end(), pred);
}

// Whether checkpoint tensor `n` belongs to the tower: under the prefix, and
// for a scoped tower under one of its roots.
bool in_tower(
    const std::string& n, const std::string& prefix, const WeightScope& scope) {
  return starts_with(n, prefix) &&
         (scope.roots.empty() || any_of(scope.roots, [&](const std::string& r) {
            return starts_with(n, r);
          }));
}

// Compares the checkpoint's tensors of the tower with `params`; counts the
// others (and the scope's unused ones) in report.ignored. `found`: the
// parameters the checkpoint holds.
Mismatches compare(
    const SafetensorsCheckpoint& ckpt,
    const std::vector<std::string>& names,
    const std::map<std::string, at::Tensor>& params,
    const WeightScope& scope,
    WeightLoadReport& report,
    std::set<std::string>& found) {
  const std::string& prefix = report.prefix;
  Mismatches m;
  for (const auto& n : names) {
    const bool unused =
        any_of(scope.unused, [&](const std::string& u) { return n == u; });
    if (!in_tower(n, prefix, scope) || unused) {
      ++report.ignored;
      continue;
    }
    const std::string local = n.substr(prefix.size());
    auto it = params.find(local);
    if (it == params.end()) {
      m.unexpected.push_back(n);
      continue;
    }
    found.insert(local);
    const SafetensorsEntry& e = ckpt.entry(n);
    if (!at::IntArrayRef(e.shape).equals(it->second.sizes())) {
      m.misshaped.push_back(
          n + " (expected " + sizes_text(it->second.sizes()) + ", got " +
          sizes_text(e.shape) + ")");
    } else if (
        e.dtype == at::ScalarType::Undefined || !at::isFloatingType(e.dtype)) {
      m.bad_dtype.push_back(n + " (" + e.dtype_name + ")");
    }
  }
  for (const auto& kv : params) {
    const bool optional = any_of(scope.optional, [&](const std::string& o) {
      return ends_with(kv.first, o);
    });
    if (!found.count(kv.first) && !optional) {
      m.missing.push_back(prefix + kv.first);
    }
  }
  return m;
}

}  // namespace

WeightLoadReport load_vision_weights(
    torch::nn::Module& module,
    const SafetensorsCheckpoint& ckpt,
    const QwenLoadOptions& options,
    const std::string& what,
    const WeightScope& scope) {
  const at::ScalarType dtype = options.dtype;
  FRAMESHARD_TORCH_CHECK(
      dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf ||
          dtype == at::kDouble,
      kLoadFn,
      "expected dtype float32, bfloat16, float16 or float64, got ",
      dtype);
  const std::vector<std::string> names = ckpt.names();
  WeightLoadReport report;
  report.files = ckpt.files();
  FRAMESHARD_TORCH_CHECK(
      scope.roots.empty() || options.prefix.empty(),
      kLoadFn,
      "expected no QwenLoadOptions::prefix for the ",
      what,
      " (its tensors sit at the checkpoint's top level), got \"",
      options.prefix,
      "\"");
  if (!scope.roots.empty()) {
    report.prefix.clear();
  } else {
    report.prefix = options.prefix.empty() ? detect_prefix(names, ckpt, what)
                                           : options.prefix;
  }

  std::map<std::string, at::Tensor> params;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    params.emplace(item.key(), item.value());
  }
  std::set<std::string> found;
  const Mismatches bad = compare(ckpt, names, params, scope, report, found);
  FRAMESHARD_TORCH_CHECK(
      bad.empty(),
      kLoadFn,
      "expected the ",
      params.size(),
      " tensors of the ",
      what,
      " under \"",
      report.prefix,
      "\" in ",
      ckpt.source(),
      ", got ",
      bad.text());

  module.to(dtype);
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!found.count(item.key())) {
      ++report.defaulted;  // an optional parameter (compare checked it)
      continue;
    }
    item.value().copy_(ckpt.read(report.prefix + item.key()).to(dtype));
    ++report.loaded;
  }
  return report;
}

std::map<std::string, at::Tensor> vision_state_dict(
    const torch::nn::Module& module, const std::string& prefix) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    out.emplace(
        prefix + item.key(), item.value().detach().to(at::kCPU).clone());
  }
  return out;
}

}  // namespace models
}  // namespace frameshard
