// Non-negative least squares for the three cost coefficients, and the
// calibration file.
#include <frameshard/calibrate.h>
#include <frameshard/error.h>
#include "core/nnls.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace frameshard {

namespace {

// "expected samples[i].<expected>, got <got>" unless ok.
template <typename T>
void check_sample(
    const char* fn, std::size_t i, bool ok, const char* expected, T got) {
  FRAMESHARD_CHECK(
      ok, fn, "expected samples[", i, "].", expected, ", got ", got);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) {
    return "";
  }
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

QuadraticFit fit_quadratic(const std::vector<TimingSample>& samples) {
  const char* fn = "fit_quadratic";
  FRAMESHARD_CHECK(
      !samples.empty(), fn, "expected at least one sample, got none");
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const TimingSample& s = samples[i];
    check_sample(fn, i, s.patch_rows > 0, "patch_rows > 0", s.patch_rows);
    check_sample(fn, i, s.frames > 0, "frames > 0", s.frames);
    check_sample(
        fn,
        i,
        std::isfinite(s.seconds) && s.seconds > 0.0,
        "seconds finite and > 0",
        s.seconds);
  }
  // Row [k p^2, k p, k, 1]: a, b, c per frame, then the per-call constant.
  std::vector<detail::FeatureRow> rows;
  std::vector<double> seconds;
  for (const TimingSample& s : samples) {
    const double p = static_cast<double>(s.patch_rows);
    const double k = static_cast<double>(s.frames);
    rows.push_back({k * p * p, k * p, k, 1.0, 0.0});
    seconds.push_back(s.seconds);
  }
  const detail::FeatureRow best = detail::nnls_relative(rows, seconds, 4).x;
  QuadraticFit fit;
  fit.model = CostModel::quadratic(best[0], best[1], best[2]);
  fit.per_call = best[3];
  double sum_sq = 0.0;
  for (const TimingSample& s : samples) {
    const double predicted =
        fit.per_call + static_cast<double>(s.frames) * fit.model(s.patch_rows);
    const double e = predicted / s.seconds - 1.0;
    fit.relative_errors.push_back(e);
    fit.max_relative_error = std::max(fit.max_relative_error, std::fabs(e));
    sum_sq += e * e;
  }
  fit.rms_relative_error =
      std::sqrt(sum_sq / static_cast<double>(samples.size()));
  return fit;
}

std::string calibration_text(
    const CostModel& model, const std::string& comment) {
  std::ostringstream out;
  std::istringstream lines(comment);
  std::string line;
  while (std::getline(lines, line)) {
    out << "# " << line << "\n";
  }
  out.precision(17);
  out << "quadratic:" << model.a << "," << model.b << "," << model.c << "\n";
  return out.str();
}

CostModel read_calibration(const std::string& path, const char* field) {
  const char* fn = "read_calibration";
  const char* expected =
      "expected a calibration file (frameshard calibrate --out) holding one "
      "line quadratic:a,b,c after # comments, got \"";
  std::ifstream in(path);
  FRAMESHARD_CHECK(
      in.good(), fn, field, ": ", expected, path, "\", which cannot be read");
  std::string line, spec;
  int lines = 0;
  while (std::getline(in, line) && ++lines <= 10000) {
    line = trim(line);
    if (line.empty() || line[0] == '#') {
      continue;
    }
    FRAMESHARD_CHECK(
        spec.empty(),
        fn,
        field,
        ": ",
        expected,
        path,
        "\" with a second value line \"",
        detail::excerpt(line),
        "\"");
    spec = line;
  }
  FRAMESHARD_CHECK(
      spec.rfind("quadratic:", 0) == 0,
      fn,
      field,
      ": ",
      expected,
      path,
      "\" holding \"",
      detail::excerpt(spec),
      "\"");
  CostModel m = parse_cost_alpha(spec, "qwen3-vl", field);
  m.seconds_per_unit = 1.0;
  m.label = "calibrated " + path + " (" + m.label + ")";
  return m;
}

}  // namespace frameshard
