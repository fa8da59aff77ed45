#include "io/jsonl_lines.h"

#include <frameshard/error.h>

#include "io/json_text.h"

#include <sstream>

namespace frameshard {
namespace json_detail {

void line_error(
    const LineRef& at,
    const std::string& field,
    const std::string& expected,
    const std::string& got) {
  detail::fail(
      at.fn,
      at.where,
      ": ",
      field.empty() ? "" : field + ": ",
      "expected ",
      expected,
      ", got ",
      got);
}

int64_t for_each_jsonl_line(
    const char* fn,
    const std::string& text,
    const std::string& source,
    const std::function<void(const nlohmann::json&, const LineRef&)>& read,
    const std::string& object_shape) {
  std::istringstream in(text);
  std::string line;
  int64_t lines = 0;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      continue;  // blank lines separate nothing, they are just skipped
    }
    const LineRef at{
        fn,
        source.empty() ? "line " + std::to_string(number)
                       : source + ":" + std::to_string(number)};
    nlohmann::json doc;
    std::string problem;
    if (!parse_json_strict(line, doc, problem)) {
      line_error(
          at, "", "a JSON object per line", "invalid JSON (" + problem + ")");
    }
    if (!doc.is_object()) {
      line_error(
          at, "", "a JSON object per line" + object_shape, json_excerpt(doc));
    }
    read(doc, at);
    ++lines;
  }
  return lines;
}

bool is_manifest_count(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>() <= static_cast<uint64_t>(kMaxManifestEntry);
  }
  return v.is_number_integer() && v.get<int64_t>() >= 0 &&
         v.get<int64_t>() <= kMaxManifestEntry;
}

}  // namespace json_detail
}  // namespace frameshard
