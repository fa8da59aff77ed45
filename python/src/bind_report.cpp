// frameshard._C: the A/B plot of `frameshard ab` (frameshard/train/ab_plot.h),
// for `python -m frameshard ab` (frameshard.hf_ab), so both commands draw
// the same SVG. Pure: no communication.
#include "bindings.h"

#include <frameshard/train/ab_plot.h>

#include <string>
#include <tuple>
#include <vector>

namespace frameshard {
namespace python {

namespace {
// (name, losses, step_seconds): one arm, as Python passes it.
using Series =
    std::tuple<std::string, std::vector<double>, std::vector<double>>;
}  // namespace

void init_report(py::module_& m) {
  m.def(
      "ab_plot_svg",
      [](const std::vector<Series>& series, const std::string& title) {
        std::vector<train::PlotSeries> s;
        s.reserve(series.size());
        for (const auto& [name, loss, step_seconds] : series) {
          s.push_back(train::PlotSeries{name, loss, step_seconds});
        }
        return train::ab_plot_svg(s, title);
      },
      py::arg("series"),
      py::arg("title"),
      R"doc(The SVG document of `frameshard ab`: per-step loss and step time of
each arm; series is [(name, losses, step_seconds), ...], all of one length.
Raises FrameshardError when empty or of unequal lengths.)doc");
}

}  // namespace python
}  // namespace frameshard
