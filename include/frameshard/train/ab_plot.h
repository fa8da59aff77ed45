// File: frameshard/train/ab_plot.h
//
// The SVG `frameshard ab` writes: two panels side by side, the per-step loss
// of both arms (sharded and replicated, distinguishable lines and a legend)
// and their per-step times, with labelled axes and ticks. Torch-free, no
// external dependency; the output is a self-contained SVG 1.1 document.
//
// Usage:
//   frameshard::train::PlotSeries a{"sharded", losses_a, step_s_a};
//   frameshard::train::PlotSeries b{"replicated", losses_b, step_s_b};
//   std::string svg = frameshard::train::ab_plot_svg({a, b}, "title");
#pragma once

#include <string>
#include <vector>

namespace frameshard {
namespace train {

struct PlotSeries {
  std::string name;
  std::vector<double> loss;          // per step
  std::vector<double> step_seconds;  // per step
};

/// Throws frameshard::Error when the series are empty or of unequal length.
std::string ab_plot_svg(
    const std::vector<PlotSeries>& series, const std::string& title);

}  // namespace train
}  // namespace frameshard
