// Non-negative least squares for the three cost coefficients, and the
// calibration file.
#include <frameshard/calibrate.h>
#include <frameshard/error.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace frameshard {

namespace {

constexpr int kCoefs = 4;  // a (p^2), b (p), c (1) per frame; per call

// Row i of the weighted system: [k p^2, k p, k, 1] / t, target 1 (the
// relative error).
std::array<double, kCoefs> weighted_row(const TimingSample& s) {
  const double p = static_cast<double>(s.patch_rows);
  const double k = static_cast<double>(s.frames);
  return {
      k * p * p / s.seconds, k * p / s.seconds, k / s.seconds, 1.0 / s.seconds};
}

// Solves the normal equations restricted to the coefficients in `mask`
// (bit k: coefficient k free, else 0). Columns are scaled to unit norm first
// (p^2 / t and 1 / t differ by ~10^7). Returns false when singular (single
// frames only: c and per_call are the same column).
bool solve_subset(
    const std::vector<TimingSample>& samples,
    unsigned mask,
    std::array<double, kCoefs>& x) {
  std::array<int, kCoefs> cols{};
  int n = 0;
  for (int k = 0; k < kCoefs; ++k) {
    if (mask & (1U << k)) {
      cols[n++] = k;
    }
  }
  std::array<double, kCoefs> scale{};
  for (const TimingSample& s : samples) {
    const auto row = weighted_row(s);
    for (int i = 0; i < n; ++i) {
      scale[i] += row[cols[i]] * row[cols[i]];
    }
  }
  for (int i = 0; i < n; ++i) {
    scale[i] = std::sqrt(scale[i]);
  }
  // Augmented normal matrix [A^T A | A^T 1] in scaled columns.
  double m[kCoefs][kCoefs + 1] = {};
  for (const TimingSample& s : samples) {
    const auto row = weighted_row(s);
    for (int i = 0; i < n; ++i) {
      const double ri = row[cols[i]] / scale[i];
      for (int j = 0; j < n; ++j) {
        m[i][j] += ri * row[cols[j]] / scale[j];
      }
      m[i][n] += ri;
    }
  }
  // Gaussian elimination with partial pivoting.
  for (int c = 0; c < n; ++c) {
    int piv = c;
    for (int r = c + 1; r < n; ++r) {
      if (std::fabs(m[r][c]) > std::fabs(m[piv][c])) {
        piv = r;
      }
    }
    if (std::fabs(m[piv][c]) < 1e-12) {
      return false;
    }
    for (int j = 0; j <= n; ++j) {
      std::swap(m[c][j], m[piv][j]);
    }
    for (int r = 0; r < n; ++r) {
      if (r != c) {
        const double f = m[r][c] / m[c][c];
        for (int j = c; j <= n; ++j) {
          m[r][j] -= f * m[c][j];
        }
      }
    }
  }
  x = {};
  for (int i = 0; i < n; ++i) {
    x[cols[i]] = m[i][n] / m[i][i] / scale[i];
  }
  return true;
}

double squared_relative_error(
    const std::vector<TimingSample>& samples,
    const std::array<double, kCoefs>& x) {
  double sum = 0.0;
  for (const TimingSample& s : samples) {
    const auto row = weighted_row(s);
    const double e =
        row[0] * x[0] + row[1] * x[1] + row[2] * x[2] + row[3] * x[3] - 1.0;
    sum += e * e;
  }
  return sum;
}

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
  // Exact NNLS for four unknowns: the optimum has some set of free
  // coefficients at which the unconstrained fit is feasible.
  std::array<double, kCoefs> best{};
  double best_err = std::numeric_limits<double>::infinity();
  for (unsigned mask = 1; mask < (1U << kCoefs); ++mask) {
    std::array<double, kCoefs> x{};
    if (!solve_subset(samples, mask, x) ||
        std::any_of(x.begin(), x.end(), [](double v) { return v < 0.0; })) {
      continue;
    }
    const double err = squared_relative_error(samples, x);
    if (err < best_err) {
      best_err = err;
      best = x;
    }
  }
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
