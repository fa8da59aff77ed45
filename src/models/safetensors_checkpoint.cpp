// SafetensorsCheckpoint: one safetensors file or a sharded
// model.safetensors.index.json (see frameshard/models/safetensors.h).
#include "io/json_text.h"
#include "models/file_checks.h"
#include "models/safetensors_detail.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace frameshard {
namespace models {

namespace {

namespace fs = std::filesystem;
constexpr const char* kOpenFn = "SafetensorsCheckpoint::open";
constexpr const char* kOwner = "SafetensorsCheckpoint";

// What `path` names: for a directory, its index or its single file.
std::string checkpoint_source(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    return path;
  }
  const fs::path dir(path);
  if (fs::exists(dir / "model.safetensors.index.json", ec)) {
    return (dir / "model.safetensors.index.json").string();
  }
  FRAMESHARD_TORCH_CHECK(
      fs::exists(dir / "model.safetensors", ec),
      kOpenFn,
      "expected model.safetensors or model.safetensors.index.json in ",
      path,
      ", got neither");
  return (dir / "model.safetensors").string();
}

bool is_index(const std::string& source) {
  const std::string suffix = ".index.json";
  return source.size() > suffix.size() &&
         source.compare(source.size() - suffix.size(), suffix.size(), suffix) ==
             0;
}

bool inside_directory(const std::string& file) {
  const fs::path p = fs::path(file).lexically_normal();
  return !file.empty() && p.is_relative() && !p.empty() && *p.begin() != ".." &&
         p != ".";
}

nlohmann::json read_index(const std::string& source) {
  detail::regular_file_size(source, kOpenFn);
  std::ifstream in(source);
  FRAMESHARD_TORCH_CHECK(in, kOpenFn, "cannot open ", source);
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  std::string problem;
  FRAMESHARD_TORCH_CHECK(
      json_detail::parse_json_strict(text.str(), j, problem),
      kOpenFn,
      "expected JSON in ",
      source,
      ", got ",
      problem);
  FRAMESHARD_TORCH_CHECK(
      j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
      kOpenFn,
      "expected an object with a \"weight_map\" object in ",
      source,
      ", got ",
      j.is_object() ? "no \"weight_map\" object" : j.type_name());
  return j;
}

}  // namespace

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  SafetensorsCheckpoint ck;
  ck.source_ = checkpoint_source(path);
  if (!is_index(ck.source_)) {
    ck.files_.push_back(std::make_shared<SafetensorsFile>(ck.source_));
    for (const auto& name : ck.files_[0]->names()) {
      ck.where_[name] = 0;
    }
    return ck;
  }

  ck.sharded_ = true;
  const nlohmann::json j = read_index(ck.source_);
  const fs::path dir = fs::path(ck.source_).parent_path();
  std::map<std::string, size_t> file_index;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    FRAMESHARD_TORCH_CHECK(
        it.value().is_string(),
        kOpenFn,
        "expected a file name for \"",
        ::frameshard::detail::excerpt(it.key()),
        "\" in the weight_map of ",
        ck.source_,
        ", got ",
        json_detail::json_excerpt(it.value()));
    const std::string file = it.value().get<std::string>();
    // A shard beside the index: never an absolute path or one through "..",
    // which would read a file outside the checkpoint directory.
    FRAMESHARD_TORCH_CHECK(
        inside_directory(file),
        kOpenFn,
        "expected a file name inside the checkpoint directory for \"",
        ::frameshard::detail::excerpt(it.key()),
        "\" in the weight_map of ",
        ck.source_,
        ", got \"",
        ::frameshard::detail::excerpt(file),
        "\"");
    auto found = file_index.find(file);
    if (found == file_index.end()) {
      ck.files_.push_back(
          std::make_shared<SafetensorsFile>((dir / file).string()));
      found = file_index.emplace(file, ck.files_.size() - 1).first;
    }
    FRAMESHARD_TORCH_CHECK(
        ck.files_[found->second]->contains(it.key()),
        kOpenFn,
        "expected tensor \"",
        ::frameshard::detail::excerpt(it.key()),
        "\" in ",
        ck.files_[found->second]->path(),
        " (the weight_map of ",
        ck.source_,
        " says so), got no such tensor there");
    ck.where_[it.key()] = found->second;
  }
  return ck;
}

std::vector<std::string> SafetensorsCheckpoint::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) {
    out.push_back(f->path());
  }
  return out;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  return detail::keys_of(where_);
}

bool SafetensorsCheckpoint::contains(const std::string& name) const {
  return where_.count(name) != 0;
}

const std::string& SafetensorsCheckpoint::file_of(
    const std::string& name) const {
  return files_[detail::find_tensor(where_, name, kOwner, source_)]->path();
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(
    const std::string& name) const {
  return files_[detail::find_tensor(where_, name, kOwner, source_)]->entry(
      name);
}

at::Tensor SafetensorsCheckpoint::read(const std::string& name) const {
  return files_[detail::find_tensor(where_, name, kOwner, source_)]->read(name);
}

}  // namespace models
}  // namespace frameshard
