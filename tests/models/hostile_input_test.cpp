// Hostile input to the models layer (issue 13): deeply nested or
// duplicate-keyed JSON in safetensors headers, config.json and checkpoint
// indexes; config.json sizes that would exhaust memory; a weight_map that
// escapes the checkpoint directory; a write that fails midway. Each is an
// error with a short message, never a crash or an input-sized allocation.
#include <frameshard/models/hf_config.h>
#include <frameshard/models/qwen_factory.h>
#include <frameshard/models/safetensors.h>

#include "testing/qwen_fixtures.h"
#include "testing/scratch_dir.h"
#include "testing/torch_error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/resource.h>
#include <unistd.h>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace frameshard {
namespace models {
namespace {

using testing::ScratchDir;
using testing::torch_error_of;
using testing::write_bytes;

constexpr std::size_t kShortMessage = 1000;

std::string safetensors_bytes(const std::string& header) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  return out + header;
}

std::string nested(std::size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

void expect_short_error(const std::string& m, const std::string& part) {
  EXPECT_NE(m.find(part), std::string::npos) << m;
  EXPECT_LT(m.size(), kShortMessage);
}

TEST(HostileSafetensors, NestingOfAHundredThousandLevelsIsAShortError) {
  ScratchDir dir;
  const std::string path = dir.path() + "/deep.safetensors";
  for (std::size_t levels : {10000u, 100000u}) {
    write_bytes(
        path,
        safetensors_bytes(
            "{\"a\": {\"dtype\": \"F32\", \"shape\": " + nested(levels) +
            ", \"data_offsets\": [0, 0]}}"));
    expect_short_error(
        torch_error_of([&] { SafetensorsFile f(path); }),
        "nesting deeper than 64 levels");
  }
}

TEST(HostileSafetensors, DuplicateTensorNamesAreAnError) {
  ScratchDir dir;
  const std::string path = dir.path() + "/dup.safetensors";
  const std::string e =
      R"({"dtype": "F32", "shape": [0], "data_offsets": [0, 0]})";
  write_bytes(path, safetensors_bytes("{\"a\": " + e + ", \"a\": " + e + "}"));
  expect_short_error(
      torch_error_of([&] { SafetensorsFile f(path); }),
      "a duplicate key \"a\"");
}

TEST(HostileSafetensors, AMegabyteTensorNameGivesAShortMessage) {
  ScratchDir dir;
  const std::string path = dir.path() + "/long.safetensors";
  // Appended rather than `"{\"" + std::string(...)`: GCC 12 warns
  // (-Warray-bounds, a known false positive) on that operator+ when its
  // inlining context changes, which -Werror turns into a build failure.
  std::string header = "{\"";
  header.append(std::size_t{1} << 20, 'n');
  header += "\": 1}";
  write_bytes(path, safetensors_bytes(header));
  expect_short_error(
      torch_error_of([&] { SafetensorsFile f(path); }), "characters)");
}

// Found by reading the header parser while writing the safetensors fuzz
// harness (the fuzzer had not reached them in 180 s): the shape product went
// on multiplying after its overflow was detected (UB, seen by UBSan in the
// harness; the message was right), and JSON integers of 2^63 and more
// wrapped to negative sizes and offsets (a misleading error, or UB).
TEST(HostileSafetensors, SizesAndOffsetsBeyondInt64AreRefusedWithoutWrapping) {
  ScratchDir dir;
  const std::string path = dir.path() + "/big.safetensors";
  auto error_of = [&](const std::string& shape, const std::string& offsets) {
    write_bytes(
        path,
        safetensors_bytes(
            "{\"a\": {\"dtype\": \"F32\", \"shape\": " + shape +
            ", \"data_offsets\": " + offsets + "}}") +
            std::string(4, '\0'));
    return torch_error_of([&] { SafetensorsFile f(path); });
  };
  for (const char* shape :
       {"[4611686018427387904, 4]", "[4611686018427387904, 4, 0]"}) {
    expect_short_error(
        error_of(shape, "[0, 4]"), "a shape whose byte size fits in 64 bits");
  }
  for (const char* shape :
       {"[2, 9223372036854775808]", "[18446744073709551615]"}) {
    expect_short_error(
        error_of(shape, "[0, 4]"),
        "a \"shape\" list of non-negative integers below 2^63");
  }
  expect_short_error(
      error_of("[1]", "[18446744073709551615, 3]"),
      "\"data_offsets\" [begin, end] of non-negative integers below 2^63");
}

TEST(HostileSafetensors, AShapeOfManyDimensionsGivesAShortMessage) {
  ScratchDir dir;
  const std::string path = dir.path() + "/dims.safetensors";
  std::string zeros = "0";
  for (int i = 1; i < 200000; ++i) {
    zeros += ",0";
  }
  write_bytes(
      path,
      safetensors_bytes(
          "{\"a\": {\"dtype\": \"F32\", \"shape\": [" + zeros +
          "], \"data_offsets\": [0, 4]}}") +
          std::string(4, '\0'));
  expect_short_error(
      torch_error_of([&] { SafetensorsFile f(path); }),
      "for shape [0, 0, 0, 0, 0, 0, 0, 0, ... (200000 dimensions)]");
}

TEST(HostileCheckpoint, AWeightMapEntryOutsideTheDirectoryIsRefused) {
  ScratchDir root;
  const std::string ckpt = root.path() + "/ckpt";
  std::filesystem::create_directory(ckpt);
  save_safetensors(
      root.path() + "/outside.safetensors", {{"a", at::ones({2})}});
  const std::vector<std::string> escapes = {
      "../outside.safetensors",
      root.path() + "/outside.safetensors",
      "sub/../../outside.safetensors"};
  for (const std::string& file : escapes) {
    write_bytes(
        ckpt + "/model.safetensors.index.json",
        "{\"weight_map\": {\"a\": \"" + file + "\"}}");
    expect_short_error(
        torch_error_of([&] { SafetensorsCheckpoint::open(ckpt); }),
        "expected a file name inside the checkpoint directory for \"a\"");
  }
}

TEST(HostileCheckpoint, NestedOrDuplicateIndexJsonIsAnError) {
  ScratchDir dir;
  const std::string index = dir.path() + "/model.safetensors.index.json";
  write_bytes(index, "{\"weight_map\": " + nested(100000) + "}");
  expect_short_error(
      torch_error_of([&] { SafetensorsCheckpoint::open(dir.path()); }),
      "nesting deeper than 64 levels");
  write_bytes(index, R"({"weight_map": {}, "weight_map": {}})");
  expect_short_error(
      torch_error_of([&] { SafetensorsCheckpoint::open(dir.path()); }),
      "a duplicate key \"weight_map\"");
}

TEST(HostileCheckpoint, AMegabyteWeightMapKeyGivesAShortMessage) {
  ScratchDir dir;
  save_safetensors(dir.path() + "/a.safetensors", {{"a", at::ones({2})}});
  const std::string index = dir.path() + "/model.safetensors.index.json";
  const std::string key(1 << 20, 'k');
  // Not a file name, and a tensor the shard does not hold.
  for (const std::string& value :
       {std::string("3"), std::string("\"a.safetensors\"")}) {
    write_bytes(index, "{\"weight_map\": {\"" + key + "\": " + value + "}}");
    const std::string m =
        torch_error_of([&] { SafetensorsCheckpoint::open(dir.path()); });
    expect_short_error(m, "\"kkkkkkkk");
  }
}

TEST(HostileSafetensors, ReadingAMegabyteNamedTensorOfAnUnreadDtypeIsShort) {
  ScratchDir dir;
  const std::string path = dir.path() + "/u8.safetensors";
  const std::string name(1 << 20, 'n');
  write_bytes(
      path,
      safetensors_bytes(
          "{\"" + name +
          "\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, "
          "1]}}") +
          std::string(1, '\0'));
  const SafetensorsFile f(path);
  expect_short_error(
      torch_error_of([&] { f.read(name); }), "in F64, F32, F16, BF16");
  expect_short_error(
      torch_error_of([&] { f.read(name + "x"); }), "expected a tensor named");
}

TEST(HostileHfConfig, NestingDuplicatesAndHugeNumbersAreShortErrors) {
  const std::string head = R"({"model_type": "qwen3_vl", "vision_config": )";
  expect_short_error(
      torch_error_of([&] {
        parse_qwen_vision_config(head + nested(100000) + "}", "deep.json");
      }),
      "expected JSON in deep.json, got nesting deeper than 64 levels");
  expect_short_error(
      torch_error_of([&] {
        parse_qwen_vision_config(
            head + R"({"depth": 2, "depth": 3}})", "dup.json");
      }),
      "a duplicate key \"depth\"");
  expect_short_error(
      torch_error_of([&] {
        parse_qwen_vision_config(head + R"({"depth": 1e400}})", "big.json");
      }),
      "expected JSON in big.json, got a parse error");
  expect_short_error(
      torch_error_of([&] {
        parse_qwen_vision_config(
            head + "{\"hidden_act\": [\"" + std::string(1 << 20, 'x') +
            "\"]}}");
      }),
      "vision_config.hidden_act to be a string");
}

TEST(HostileHfConfig, SizesThatWouldExhaustMemoryNameFieldLimitAndValue) {
  const std::string head = R"({"model_type": "qwen2_5_vl", "vision_config": )";
  expect_short_error(
      torch_error_of([&] {
        parse_qwen_vision_config(head + R"({"depth": 1099511627776}})");
      }),
      "expected vision_config.depth to be an integer in [1, 256] in "
      "config.json, got 1099511627776");
  for (const char* key :
       {"window_size", "hidden_size", "intermediate_size", "num_heads"}) {
    expect_short_error(
        torch_error_of([&] {
          parse_qwen_vision_config(head + "{\"" + key + "\": 1099511627776}}");
        }),
        std::string("vision_config.") + key +
            " to be an integer in [1, 65536]");
  }
  expect_short_error(
      torch_error_of([&] {
        parse_qwen_vision_config(
            R"({"model_type": "qwen2_vl", "vision_config": {"mlp_ratio": 1e300}})");
      }),
      "vision_config.mlp_ratio to be a positive number <= 65536");
}

// Found while writing the hf_config fuzz harness (its derived-size check
// fails under UBSan on this input; the fuzzer had not reached it in 180 s):
// each factor was within 65536, their product 65536^4 overflowed int64_t in
// in_features(), and smaller products sized the patch embedding.
TEST(HostileHfConfig, PatchFeaturesBeyondTheLimitAreRefusedBeforeOverflow) {
  const std::string huge =
      R"("in_channels": 65536, "temporal_patch_size": 65536, )"
      R"("patch_size": 65536)";
  expect_short_error(
      torch_error_of([&] {
        parse_qwen_vision_config(
            R"({"model_type": "qwen3_vl", "vision_config": {)" + huge + "}}");
      }),
      "expected vision_config.in_channels * vision_config.temporal_patch_size "
      "* vision_config.patch_size^2 (the patch features) <= 65536 in "
      "config.json, got 65536 * 65536 * 65536^2");
  expect_short_error(
      torch_error_of([&] {
        parse_qwen_vision_config(
            R"({"model_type": "qwen2_vl_vision", "patch_size": 1024})");
      }),
      "expected in_channels * temporal_patch_size * patch_size^2 (the patch "
      "features) <= 65536 in config.json, got 3 * 2 * 1024^2");
  // The limit itself is accepted, and the writer refuses what the parser
  // would refuse.
  QwenVisionConfig at_limit = parse_qwen_vision_config(
      R"({"model_type": "qwen2_5_vl", "vision_config": {"in_channels": 1, )"
      R"("temporal_patch_size": 1, "patch_size": 256}})");
  EXPECT_EQ(at_limit.in_features(), 65536);
  at_limit.as<Qwen2_5VLVisionConfig>().in_channels = 2;
  expect_short_error(
      torch_error_of([&] { qwen_vision_config_json(at_limit); }),
      "qwen_vision_config_json: expected vision_config.in_channels");
}

// The process's virtual size, to cap allocations just above it.
rlim_t virtual_bytes() {
  std::ifstream statm("/proc/self/statm");
  rlim_t pages = 0;
  statm >> pages;
  return pages * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
}

TEST(HostileHfConfig, ATowerOfTerabytesIsRefusedBeforeAnyAllocation) {
  // Every field within its own limit (depth 256, widths 65536), 5.8e12
  // parameters in all. Under an address-space cap of 2 GB more than the
  // process has, a tower that started allocating would fail differently
  // (or, uncapped, be OOM-killed); the check comes first.
  const QwenVisionConfig cfg = parse_qwen_vision_config(
      R"({"model_type": "qwen2_5_vl", "vision_config": {"depth": 256, )"
      R"("hidden_size": 65536, "intermediate_size": 65536, "num_heads": 16}})");
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old), 0);
  struct rlimit cap = old;
  cap.rlim_cur = virtual_bytes() + (rlim_t{2} << 30);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &cap), 0);
  const std::string m = torch_error_of([&] { make_qwen_vision(cfg); });
  ASSERT_EQ(setrlimit(RLIMIT_AS, &old), 0);
  expect_short_error(m, "expected a tower of at most 4294967296 parameters");
  EXPECT_NE(m.find("depth 256, width 65536"), std::string::npos) << m;
}

TEST(HostileHfConfig, HeadsThatDoNotDivideTheWidthAreRefused) {
  const QwenVisionConfig cfg = parse_qwen_vision_config(
      R"({"model_type": "qwen3_vl", "vision_config": {"depth": 1, )"
      R"("hidden_size": 100, "intermediate_size": 8, "num_heads": 16, )"
      R"("out_hidden_size": 8}})");
  expect_short_error(
      torch_error_of([&] { make_qwen_vision(cfg); }),
      "expected num_heads dividing the width 100 into heads of a size "
      "divisible by 4 (2-D rotary), got num_heads 16");
}

TEST(HostileWrite, AWriteThatFailsMidwayLeavesNoTruncatedFile) {
  ScratchDir dir;
  const std::string path = dir.path() + "/out.safetensors";
  // A file-size limit makes the write fail after 4 KB (EFBIG, not SIGXFSZ).
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string m = torch_error_of([&] {
    save_safetensors(path, {{"x", at::zeros({1 << 16})}});
  });
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  EXPECT_NE(m.find("got a failed write"), std::string::npos) << m;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace models
}  // namespace frameshard
