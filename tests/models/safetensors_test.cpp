// The safetensors reader and writer (frameshard/models/safetensors.h): a
// round trip of every supported dtype, a file written by hand from the
// specification, sharded indexes, and clear errors for corrupt files.

#include <frameshard/models/safetensors.h>

#include "testing/qwen_fixtures.h"
#include "testing/scratch_dir.h"
#include "testing/torch_error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace frameshard {
namespace models {
namespace {

using testing::read_bytes;
using testing::ScratchDir;
using testing::torch_error_of;
using testing::write_bytes;

/// A safetensors file from a header text and a byte buffer, by hand.
std::string safetensors_bytes(const std::string& header, std::string data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  return out + header + data;
}

TEST(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  ScratchDir dir;
  const std::string path = dir.path() + "/t.safetensors";
  torch::manual_seed(0);
  std::map<std::string, at::Tensor> in = {
      {"f64", at::randn({2, 3}, at::kDouble)},
      {"f32", at::randn({4}, at::kFloat)},
      {"f16", at::randn({3, 1, 2}).to(at::kHalf)},
      {"bf16", at::randn({5}).to(at::kBFloat16)},
      {"i64", at::arange(-3, 9, at::kLong).reshape({3, 4})},
      {"i32", at::tensor({7, -2, 2147483647}, at::kInt)},
      {"scalar", at::scalar_tensor(2.5, at::kFloat)},
      {"empty", at::zeros({0, 3}, at::kFloat)},
      {"noncontig", at::randn({3, 4}).t()}};
  save_safetensors(path, in, {{"format", "pt"}, {"note", "x"}});

  const std::string bytes = read_bytes(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<unsigned char>(bytes[i]);
  }
  EXPECT_EQ(header_len % 8, 0u) << "header padded to 8 bytes";
  const auto header = nlohmann::json::parse(bytes.substr(8, header_len));
  EXPECT_EQ(header["f16"]["dtype"], "F16");
  EXPECT_EQ(header["bf16"]["dtype"], "BF16");
  EXPECT_EQ(header["__metadata__"]["note"], "x");

  std::map<std::string, std::string> meta;
  const auto out = load_safetensors(path, &meta);
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(meta.at("note"), "x");
  ASSERT_EQ(out.size(), in.size());
  for (const auto& kv : in) {
    const at::Tensor& got = out.at(kv.first);
    EXPECT_EQ(got.scalar_type(), kv.second.scalar_type()) << kv.first;
    EXPECT_EQ(got.sizes(), kv.second.sizes()) << kv.first;
    EXPECT_TRUE(at::equal(got, kv.second.contiguous())) << kv.first;
  }
  SafetensorsFile f(path);
  EXPECT_EQ(f.entry("f64").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.entry("f64").end - f.entry("f64").begin, 6 * 8);
  EXPECT_EQ(
      f.names(),
      (std::vector<std::string>{
          "bf16",
          "empty",
          "f16",
          "f32",
          "f64",
          "i32",
          "i64",
          "noncontig",
          "scalar"}));
}

TEST(Safetensors, ReadsAFileWrittenByHand) {
  // The format as specified, independent of our writer: two tensors, the
  // second first in the buffer, an unpadded header.
  ScratchDir dir;
  const std::string path = dir.path() + "/h.safetensors";
  float a[2] = {1.5f, -2.0f};
  int64_t b[3] = {1, 2, 3};
  std::string data(sizeof(b) + sizeof(a), '\0');
  std::memcpy(&data[0], b, sizeof(b));
  std::memcpy(&data[sizeof(b)], a, sizeof(a));
  write_bytes(
      path,
      safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[2,1],"data_offsets":[24,32]},)"
          R"("b":{"dtype":"I64","shape":[3],"data_offsets":[0,24]}})",
          data));
  SafetensorsFile f(path);
  EXPECT_TRUE(
      at::equal(f.read("a"), at::tensor({1.5f, -2.0f}).reshape({2, 1})));
  EXPECT_TRUE(at::equal(f.read("b"), at::tensor({1, 2, 3}, at::kLong)));
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Safetensors, RejectsCorruptFilesNamingTheProblem) {
  ScratchDir dir;
  const std::string path = dir.path() + "/bad.safetensors";
  const std::string f32x2(8, '\0');
  auto open_bytes = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    SafetensorsFile f(path);
  };
  EXPECT_TORCH_ERROR_CONTAINS(
      SafetensorsFile(dir.path() + "/none"), "no such file");
  EXPECT_TORCH_ERROR_CONTAINS(open_bytes("abc"), "at least 8 bytes");
  EXPECT_TORCH_ERROR_CONTAINS(
      open_bytes(std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}"),
      "header length");
  // A header of one F32 tensor "a".
  auto f32_header = [](const std::string& shape, const std::string& offsets) {
    return R"({"a":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" +
           offsets + "}}";
  };
  // A corrupt header (with `data` after it) and the error's words.
  struct BadHeader {
    std::string header;
    std::string data;
    const char* error;
  };
  const BadHeader kBadHeaders[] = {
      {"{nope", "", "JSON"},
      {"[1]", "", "object"},
      {R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})",
       f32x2,
       "\"Q7\""},
      {f32_header("[3]", "[0,8]"), f32x2, "3 elements of F32"},
      {f32_header("[2]", "[0,16]"), f32x2, "(the byte buffer)"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       f32x2,
       "without overlap or gap"},
      {f32_header("[1]", "[0,4]"), f32x2, "truncated or trailing data"},
      {f32_header("[-2]", "[0,8]"), f32x2, "non-negative integers"},
      {R"({"a":{"dtype":"F32"}})", "", "\"data_offsets\""},
      {R"({"__metadata__":{"k":1}})", "", "string values"},
  };
  for (const BadHeader& bad : kBadHeaders) {
    SCOPED_TRACE(bad.header);
    EXPECT_TORCH_ERROR_CONTAINS(
        open_bytes(safetensors_bytes(bad.header, bad.data)), bad.error);
  }
  // A dtype we do not read opens (a quantised language model may sit in the
  // same file) but cannot be read.
  write_bytes(
      path,
      safetensors_bytes(
          R"({"q":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", f32x2));
  SafetensorsFile f(path);
  EXPECT_EQ(f.entry("q").dtype, at::ScalarType::Undefined);
  EXPECT_TORCH_ERROR_CONTAINS(f.read("q"), "got I8");
  EXPECT_TORCH_ERROR_CONTAINS(f.read("zz"), "\"zz\"");
  EXPECT_TORCH_ERROR_CONTAINS(
      save_safetensors(path, {{"b", at::ones({2}, at::kBool)}}), "got Bool");
}

TEST(Safetensors, ShardedCheckpointResolvesEveryName) {
  ScratchDir dir;
  save_safetensors(dir.path() + "/s1.safetensors", {{"a", at::ones({2})}});
  save_safetensors(
      dir.path() + "/s2.safetensors",
      {{"b", at::zeros({3}, at::kDouble)}, {"c", at::ones({1}, at::kLong)}});
  write_bytes(
      dir.path() + "/model.safetensors.index.json",
      R"({"metadata":{},"weight_map":{"a":"s1.safetensors",)"
      R"("b":"s2.safetensors","c":"s2.safetensors"}})");
  const auto ck = SafetensorsCheckpoint::open(dir.path());
  EXPECT_TRUE(ck.sharded());
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(at::equal(ck.read("b"), at::zeros({3}, at::kDouble)));
  EXPECT_NE(ck.file_of("c").find("s2.safetensors"), std::string::npos);

  write_bytes(
      dir.path() + "/model.safetensors.index.json",
      R"({"weight_map":{"a":"s2.safetensors"}})");
  EXPECT_TORCH_ERROR_CONTAINS(
      SafetensorsCheckpoint::open(dir.path()), "got no such tensor there");
  write_bytes(
      dir.path() + "/model.safetensors.index.json",
      R"({"weight_map":{"a":"s9.safetensors"}})");
  EXPECT_TORCH_ERROR_CONTAINS(
      SafetensorsCheckpoint::open(dir.path()), "no such file");
  write_bytes(dir.path() + "/model.safetensors.index.json", R"({"x":1})");
  EXPECT_TORCH_ERROR_CONTAINS(
      SafetensorsCheckpoint::open(dir.path()), "\"weight_map\"");
  ScratchDir empty;
  EXPECT_TORCH_ERROR_CONTAINS(
      SafetensorsCheckpoint::open(empty.path()), "got neither");
}

}  // namespace
}  // namespace models
}  // namespace frameshard
