// Strict JSON parsing and bounded rendering for errors (see json_text.h).
#include "io/json_text.h"

#include <frameshard/error.h>

#include <set>
#include <vector>

namespace frameshard {
namespace json_detail {

namespace {

// Byte offset where nesting first exceeds kMaxJsonDepth, or npos. Brackets
// inside strings do not count; the parser reports any other malformation.
std::size_t too_deep_at(const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return i;
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

struct DuplicateKey {
  std::string key;
};

// Appends `v` to `out` until `out` holds more than kMaxExcerptChars; the
// depth is bounded by the caller's documents (parse_json_strict) and again
// here, so a value built in code cannot recurse without bound either.
void render(const nlohmann::json& v, std::string& out, int depth) {
  if (out.size() > detail::kMaxExcerptChars) {
    return;
  }
  if (depth > kMaxJsonDepth) {
    out += "...";
    return;
  }
  if (v.is_array() || v.is_object()) {
    out += v.is_array() ? "[" : "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (out.size() > detail::kMaxExcerptChars) {
        break;
      }
      out += first ? "" : ",";
      first = false;
      if (v.is_object()) {
        out += nlohmann::json(detail::excerpt(it.key())).dump() + ":";
      }
      render(it.value(), out, depth + 1);
    }
    out += v.is_array() ? "]" : "}";
  } else if (v.is_string()) {
    out += nlohmann::json(detail::excerpt(v.get<std::string>())).dump();
  } else {
    out += v.dump();
  }
}

}  // namespace

bool parse_json_strict(
    const std::string& text, nlohmann::json& out, std::string& problem) {
  const std::size_t deep = too_deep_at(text);
  if (deep != std::string::npos) {
    problem = "nesting deeper than " + std::to_string(kMaxJsonDepth) +
              " levels at byte " + std::to_string(deep);
    return false;
  }
  // The keys seen in each open object, innermost last.
  std::vector<std::set<std::string>> keys;
  auto check_keys =
      [&keys](
          int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        if (event == E::object_start) {
          keys.emplace_back();
        } else if (event == E::object_end && !keys.empty()) {
          keys.pop_back();
        } else if (event == E::key && !keys.empty()) {
          const std::string& k = parsed.get_ref<const std::string&>();
          if (!keys.back().insert(k).second) {
            throw DuplicateKey{k};
          }
        }
        return true;
      };
  try {
    out = nlohmann::json::parse(text, check_keys);
  } catch (const DuplicateKey& d) {
    problem =
        "a duplicate key " + nlohmann::json(detail::excerpt(d.key)).dump();
    return false;
  } catch (const nlohmann::json::exception& e) {
    problem = "a parse error: " + detail::excerpt(e.what());
    return false;
  }
  return true;
}

std::string json_excerpt(const nlohmann::json& v) {
  std::string out;
  render(v, out, 0);
  return detail::excerpt(out);
}

}  // namespace json_detail
}  // namespace frameshard
