#include <frameshard/error.h>
#include <frameshard/policy.h>

#include <string>

namespace frameshard {

PolicyDecision decide_policy(
    const PolicyOptions& options,
    int64_t cp_size,
    int64_t units,
    int64_t tokens) {
  const char* fn = "decide_policy";
  FRAMESHARD_CHECK(cp_size >= 1, fn, "expected cp_size >= 1, got ", cp_size);
  FRAMESHARD_CHECK(units >= 0, fn, "expected units >= 0, got ", units);
  FRAMESHARD_CHECK(tokens >= 0, fn, "expected tokens >= 0, got ", tokens);
  FRAMESHARD_CHECK(
      options.min_tokens >= 0,
      fn,
      "expected min_tokens >= 0, got ",
      options.min_tokens);
  FRAMESHARD_CHECK(
      options.min_frames >= 0,
      fn,
      "expected min_frames >= 0, got ",
      options.min_frames);

  using std::to_string;
  if (!options.enabled) {
    return {false, "disabled"};
  }
  if (cp_size <= 1) {
    return {false, "cp_size " + to_string(cp_size) + " <= 1"};
  }
  if (units == 0) {
    return {false, "no frame units"};
  }
  // Either threshold alone is enough to shard.
  if (tokens >= options.min_tokens) {
    return {
        true,
        "tokens " + to_string(tokens) + " >= min_tokens " +
            to_string(options.min_tokens)};
  }
  if (units >= options.min_frames) {
    return {
        true,
        "units " + to_string(units) + " >= min_frames " +
            to_string(options.min_frames)};
  }
  return {
      false,
      "tokens " + to_string(tokens) + " < min_tokens " +
          to_string(options.min_tokens) + " and units " + to_string(units) +
          " < min_frames " + to_string(options.min_frames)};
}

}  // namespace frameshard
