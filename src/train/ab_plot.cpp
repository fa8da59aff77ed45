// The A/B plot (ab_plot.h): a hand-written SVG 1.1 document, two panels
// (loss and step time against step) sharing one legend. Equal losses are
// the expected outcome of an A/B, so the second series is dashed over the
// first: both stay visible where they coincide. Non-finite values (a
// diverged loss) break a line instead of breaking the axes.
#include <frameshard/train/ab_plot.h>

#include <frameshard/error.h>
#include <frameshard/xml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace frameshard {
namespace train {
namespace {

constexpr double kWidth = 960;
constexpr double kHeight = 430;
constexpr const char* kColors[] = {
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
constexpr std::size_t kColorCount = sizeof(kColors) / sizeof(kColors[0]);

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 1;  // between ticks
};

// 1, 2 or 5 times a power of ten, giving about `target` intervals.
double nice_step(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

// Rounds [lo, hi] out to whole ticks; a flat range is widened first.
Axis nice_axis(double lo, double hi, int target, bool integer_ticks) {
  if (!(hi > lo)) {
    const double pad = std::max(0.5, std::fabs(lo) * 0.05);
    lo -= pad;
    hi += pad;
  }
  Axis a;
  a.step = nice_step(hi - lo, target);
  if (integer_ticks) {
    a.step = std::max(1.0, std::round(a.step));
  }
  a.lo = std::floor(lo / a.step + 1e-9) * a.step;
  a.hi = std::ceil(hi / a.step - 1e-9) * a.step;
  return a;
}

std::string tick_label(double v, double step) {
  const int decimals = std::min(
      6, std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9))));
  if (std::fabs(v) < step * 1e-6) {
    v = 0;  // no "-0.0"
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// The tick values of an axis (counted, so no drift from repeated adds).
std::vector<double> ticks(const Axis& a) {
  const auto n = static_cast<int64_t>(std::llround((a.hi - a.lo) / a.step));
  std::vector<double> out;
  for (int64_t k = 0; k <= n; ++k) {
    out.push_back(a.lo + static_cast<double>(k) * a.step);
  }
  return out;
}

struct Panel {
  std::string heading;    // above the plot
  std::string title;      // the y-axis label
  double x0, y0, x1, y1;  // plot area
  Axis x, y;
  double px(double v) const {
    return x0 + (v - x.lo) / (x.hi - x.lo) * (x1 - x0);
  }
  double py(double v) const {
    return y1 - (v - y.lo) / (y.hi - y.lo) * (y1 - y0);
  }
};

void draw_axes(std::ostringstream& os, const Panel& p) {
  os << "<g class=\"axes\" stroke=\"#dddddd\" stroke-width=\"1\">\n";
  for (double v : ticks(p.y)) {
    os << "<line x1=\"" << num(p.x0) << "\" y1=\"" << num(p.py(v)) << "\" x2=\""
       << num(p.x1) << "\" y2=\"" << num(p.py(v)) << "\"/>\n";
  }
  os << "</g>\n<g class=\"ticks\" fill=\"#333333\">\n";
  for (double v : ticks(p.y)) {
    os << "<text x=\"" << num(p.x0 - 6) << "\" y=\"" << num(p.py(v) + 4)
       << "\" text-anchor=\"end\">" << tick_label(v, p.y.step) << "</text>\n";
  }
  for (double v : ticks(p.x)) {
    os << "<line x1=\"" << num(p.px(v)) << "\" y1=\"" << num(p.y1) << "\" x2=\""
       << num(p.px(v)) << "\" y2=\"" << num(p.y1 + 5)
       << "\" stroke=\"#333333\"/>\n"
       << "<text x=\"" << num(p.px(v)) << "\" y=\"" << num(p.y1 + 18)
       << "\" text-anchor=\"middle\">" << tick_label(v, p.x.step)
       << "</text>\n";
  }
  os << "</g>\n<rect x=\"" << num(p.x0) << "\" y=\"" << num(p.y0)
     << "\" width=\"" << num(p.x1 - p.x0) << "\" height=\"" << num(p.y1 - p.y0)
     << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  const double mid_y = (p.y0 + p.y1) / 2;
  os << "<text x=\"" << num((p.x0 + p.x1) / 2) << "\" y=\"" << num(p.y1 + 36)
     << "\" text-anchor=\"middle\">step</text>\n"
     << "<text x=\"" << num(p.x0 - 50) << "\" y=\"" << num(mid_y)
     << "\" text-anchor=\"middle\" transform=\"rotate(-90 " << num(p.x0 - 50)
     << " " << num(mid_y) << ")\">" << xml_escape(p.title) << "</text>\n"
     << "<text x=\"" << num((p.x0 + p.x1) / 2) << "\" y=\"" << num(p.y0 - 8)
     << "\" text-anchor=\"middle\" font-weight=\"bold\">"
     << xml_escape(p.heading) << "</text>\n";
}

// One polyline per run of finite values, plus a dot per point when few.
void draw_series(
    std::ostringstream& os,
    const Panel& p,
    const std::vector<double>& values,
    std::size_t index) {
  const char* color = kColors[index % kColorCount];
  const std::string dash = index == 0 ? "" : " stroke-dasharray=\"6 4\"";
  std::string points;
  auto flush = [&] {
    if (!points.empty()) {
      os << "<polyline fill=\"none\" stroke=\"" << color
         << "\" stroke-width=\"2\"" << dash << " points=\"" << points
         << "\"/>\n";
      points.clear();
    }
  };
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      flush();
      continue;
    }
    const std::string x = num(p.px(static_cast<double>(i + 1)));
    const std::string y = num(p.py(values[i]));
    points.append(points.empty() ? "" : " ").append(x).append(",").append(y);
    if (values.size() <= 60) {
      os << "<circle cx=\"" << x << "\" cy=\"" << y << "\" r=\"2.5\" fill=\""
         << color << "\"/>\n";
    }
  }
  flush();
}

// Finite range of one field over all series (lo > hi when none).
std::pair<double, double> value_range(
    const std::vector<PlotSeries>& series,
    std::vector<double> PlotSeries::*field) {
  double lo = INFINITY;
  double hi = -INFINITY;
  for (const PlotSeries& s : series) {
    for (double v : s.*field) {
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  }
  return {lo, hi};
}

void draw_panel(
    std::ostringstream& os,
    const std::vector<PlotSeries>& series,
    std::vector<double> PlotSeries::*field,
    Panel p,
    bool from_zero) {
  auto range = value_range(series, field);
  if (range.first > range.second) {
    range = {0.0, 1.0};  // nothing finite to show
  }
  const double pad = (range.second - range.first) * 0.05;
  const double lo = from_zero ? std::min(0.0, range.first) : range.first - pad;
  p.y = nice_axis(lo, range.second + pad, 5, false);
  const auto steps = static_cast<double>((series[0].*field).size());
  p.x = nice_axis(1, std::max(2.0, steps), 6, true);
  os << "<g class=\"panel\">\n";
  draw_axes(os, p);
  for (std::size_t i = 0; i < series.size(); ++i) {
    draw_series(os, p, series[i].*field, i);
  }
  os << "</g>\n";
}

void draw_legend(
    std::ostringstream& os, const std::vector<PlotSeries>& series) {
  // About 7 px per character at font-size 12.
  double width = 0;
  for (const PlotSeries& s : series) {
    width += 30 + 7.0 * static_cast<double>(s.name.size()) + 24;
  }
  double x = (kWidth - width) / 2;
  const double y = 52;
  os << "<g class=\"legend\">\n";
  for (std::size_t i = 0; i < series.size(); ++i) {
    os << "<line x1=\"" << num(x) << "\" y1=\"" << num(y) << "\" x2=\""
       << num(x + 24) << "\" y2=\"" << num(y) << "\" stroke=\""
       << kColors[i % kColorCount] << "\" stroke-width=\"2\""
       << (i == 0 ? "" : " stroke-dasharray=\"6 4\"") << "/>\n"
       << "<text x=\"" << num(x + 30) << "\" y=\"" << num(y + 4) << "\">"
       << xml_escape(series[i].name) << "</text>\n";
    x += 30 + 7.0 * static_cast<double>(series[i].name.size()) + 24;
  }
  os << "</g>\n";
}

void check_series(const std::vector<PlotSeries>& series) {
  const char* fn = "train::ab_plot_svg";
  FRAMESHARD_CHECK(
      !series.empty(), fn, "expected at least one series, got none");
  const std::size_t steps = series[0].loss.size();
  FRAMESHARD_CHECK(
      steps > 0,
      fn,
      "series \"",
      series[0].name,
      "\": expected at least one step, got none");
  for (const PlotSeries& s : series) {
    FRAMESHARD_CHECK(
        s.loss.size() == steps,
        fn,
        "series \"",
        s.name,
        "\": expected ",
        steps,
        " losses (as series \"",
        series[0].name,
        "\"), got ",
        s.loss.size());
    FRAMESHARD_CHECK(
        s.step_seconds.size() == steps,
        fn,
        "series \"",
        s.name,
        "\": expected ",
        steps,
        " step times (one per loss), got ",
        s.step_seconds.size());
  }
}

}  // namespace

std::string ab_plot_svg(
    const std::vector<PlotSeries>& series, const std::string& title) {
  check_series(series);
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\""
     << kWidth << "\" height=\"" << kHeight << "\" viewBox=\"0 0 " << kWidth
     << " " << kHeight
     << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
        "font-size=\"12\">\n"
     << "<title>" << xml_escape(title) << "</title>\n"
     << "<rect width=\"" << kWidth << "\" height=\"" << kHeight
     << "\" fill=\"#ffffff\"/>\n"
     << "<text x=\"" << num(kWidth / 2)
     << "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" "
        "font-weight=\"bold\">"
     << xml_escape(title) << "</text>\n";
  draw_legend(os, series);
  const double top = 100;
  const double bottom = kHeight - 56;
  draw_panel(
      os,
      series,
      &PlotSeries::loss,
      Panel{"Loss", "loss", 80, top, 450, bottom, {}, {}},
      false);
  draw_panel(
      os,
      series,
      &PlotSeries::step_seconds,
      Panel{"Step time", "step time (s)", 570, top, 940, bottom, {}, {}},
      true);
  os << "</svg>\n";
  return os.str();
}

}  // namespace train
}  // namespace frameshard
