// Exact NNLS over column subsets (nnls.h).
#include "core/nnls.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace frameshard::detail {

namespace {

// Solves the normal equations restricted to the columns in `mask` (bit k:
// column k free, else 0). Columns are scaled to unit norm first (p^2 / t and
// 1 / t differ by ~10^7). False when singular.
bool solve_subset(
    const std::vector<FeatureRow>& rows,
    const std::vector<double>& seconds,
    unsigned mask,
    FeatureRow& x) {
  std::array<int, kMaxFeatures> cols{};
  int n = 0;
  for (int k = 0; k < kMaxFeatures; ++k) {
    if (mask & (1U << k)) {
      cols[n++] = k;
    }
  }
  std::array<double, kMaxFeatures> scale{};
  for (std::size_t s = 0; s < rows.size(); ++s) {
    for (int i = 0; i < n; ++i) {
      const double r = rows[s][cols[i]] / seconds[s];
      scale[i] += r * r;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!(scale[i] > 0.0)) {
      return false;
    }
    scale[i] = std::sqrt(scale[i]);
  }
  // Augmented normal matrix [A^T A | A^T 1] in scaled columns.
  double m[kMaxFeatures][kMaxFeatures + 1] = {};
  for (std::size_t s = 0; s < rows.size(); ++s) {
    for (int i = 0; i < n; ++i) {
      const double ri = rows[s][cols[i]] / seconds[s] / scale[i];
      for (int j = 0; j < n; ++j) {
        m[i][j] += ri * rows[s][cols[j]] / seconds[s] / scale[j];
      }
      m[i][n] += ri;
    }
  }
  // Gauss-Jordan elimination with partial pivoting.
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
    const std::vector<FeatureRow>& rows,
    const std::vector<double>& seconds,
    const FeatureRow& x) {
  double sum = 0.0;
  for (std::size_t s = 0; s < rows.size(); ++s) {
    double predicted = 0.0;
    for (int k = 0; k < kMaxFeatures; ++k) {
      predicted += rows[s][k] * x[k];
    }
    const double e = predicted / seconds[s] - 1.0;
    sum += e * e;
  }
  return sum;
}

}  // namespace

NnlsFit nnls_relative(
    const std::vector<FeatureRow>& rows,
    const std::vector<double>& seconds,
    int features) {
  NnlsFit best;
  best.squared_error = std::numeric_limits<double>::infinity();
  const unsigned subsets = 1U << std::clamp(features, 1, kMaxFeatures);
  for (unsigned mask = 1; mask < subsets; ++mask) {
    FeatureRow x{};
    if (!solve_subset(rows, seconds, mask, x) ||
        std::any_of(x.begin(), x.end(), [](double v) { return v < 0.0; })) {
      continue;
    }
    const double err = squared_relative_error(rows, seconds, x);
    if (err < best.squared_error) {
      best.squared_error = err;
      best.x = x;
    }
  }
  if (!std::isfinite(best.squared_error)) {  // no usable column: predict 0
    best.x = {};
    best.squared_error = static_cast<double>(rows.size());
  }
  return best;
}

}  // namespace frameshard::detail
