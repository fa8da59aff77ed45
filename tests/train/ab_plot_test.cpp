// The A/B plot (frameshard/train/ab_plot.h): a well-formed SVG with both
// series in both panels, escaped text, and clear errors for series that do
// not line up.
#include <frameshard/train/ab_plot.h>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "testing/expect_error.h"

namespace frameshard {
namespace train {
namespace {

using frameshard::testing::error_of;
using frameshard::testing::expect_contains;

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos;
       at = text.find(part, at + 1)) {
    ++n;
  }
  return n;
}

// A small XML check: every element opened is closed in order, nothing is
// left open, and no text holds a raw '<' or a bare '&'. Returns "" when
// well-formed, else what is wrong.
std::string xml_problem(const std::string& doc) {
  std::vector<std::string> open;
  std::size_t i = 0;
  while (i < doc.size()) {
    if (doc[i] == '&') {
      const auto semi = doc.find(';', i);
      const std::string entity = doc.substr(i, semi - i + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" &&
          entity != "&quot;" && entity != "&apos;") {
        return "bad entity at " + std::to_string(i);
      }
    }
    if (doc[i] != '<') {
      ++i;
      continue;
    }
    const auto close = doc.find('>', i);
    if (close == std::string::npos) {
      return "unterminated tag at " + std::to_string(i);
    }
    const std::string tag = doc.substr(i + 1, close - i - 1);
    if (tag.find('<') != std::string::npos) {
      return "'<' inside a tag at " + std::to_string(i);
    }
    if (tag[0] == '?' || tag[0] == '!') {
      // declaration or comment
    } else if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) {
        return "unbalanced </" + tag.substr(1) + ">";
      }
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
    i = close + 1;
  }
  return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

std::vector<PlotSeries> two_arms(std::size_t steps) {
  PlotSeries a{"sharded", {}, {}};
  PlotSeries b{"replicated", {}, {}};
  for (std::size_t i = 0; i < steps; ++i) {
    const double loss = 5.5 * std::exp(-0.1 * static_cast<double>(i)) + 1.9;
    a.loss.push_back(loss);
    b.loss.push_back(loss + 1e-6);
    a.step_seconds.push_back(0.42 + 0.01 * static_cast<double>(i % 3));
    b.step_seconds.push_back(0.71 + 0.01 * static_cast<double>(i % 2));
  }
  return {a, b};
}

TEST(AbPlot, IsAWellFormedSvgWithBothSeriesInBothPanels) {
  const std::string svg =
      ab_plot_svg(two_arms(30), "frameshard ab: mixed, cp 2");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<svg"), 1);
  EXPECT_EQ(count(svg, "</svg>"), 1);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
  expect_contains(svg, "frameshard ab: mixed, cp 2");
  expect_contains(svg, ">sharded</text>");
  expect_contains(svg, ">replicated</text>");
  expect_contains(svg, ">loss</text>");
  expect_contains(svg, ">step time (s)</text>");
  expect_contains(svg, ">step</text>");
  // One line per series per panel; the second arm is dashed (in the legend
  // too) so equal losses stay visible.
  EXPECT_EQ(count(svg, "<polyline"), 4);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 3);
  // The step axis reaches the last step; a time tick at 0 (times from 0).
  expect_contains(svg, ">30</text>");
  expect_contains(svg, ">0.0</text>");
}

TEST(AbPlot, EscapesTheTitleAndTheSeriesNames) {
  auto series = two_arms(3);
  series[0].name = "a<b & \"c\"";
  const std::string svg = ab_plot_svg(series, "x > y's");
  EXPECT_EQ(xml_problem(svg), "");
  expect_contains(svg, "a&lt;b &amp; &quot;c&quot;");
  expect_contains(svg, "x &gt; y&apos;s");
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
}

TEST(AbPlot, NonFiniteValuesBreakTheLineInsteadOfTheAxes) {
  auto series = two_arms(10);
  series[0].loss[4] = std::nan("");
  series[1].loss[7] = INFINITY;
  const std::string svg = ab_plot_svg(series, "diverged");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<polyline"), 6);  // each loss line in two pieces
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(AbPlot, OneStepAndFlatSeriesStillGiveAxes) {
  PlotSeries a{"only", {2.0}, {0.5}};
  const std::string svg = ab_plot_svg({a}, "one");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<polyline"), 2);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(AbPlot, RejectsSeriesThatDoNotLineUp) {
  const std::string fn = "frameshard::train::ab_plot_svg: ";
  expect_contains(
      error_of([] { ab_plot_svg({}, "t"); }),
      fn + "expected at least one series, got none");
  auto series = two_arms(5);
  series[1].loss.pop_back();
  expect_contains(
      error_of([&] { ab_plot_svg(series, "t"); }),
      fn + "series \"replicated\": expected 5 losses (as series "
           "\"sharded\"), got 4");
  series = two_arms(5);
  series[0].step_seconds.push_back(1.0);
  expect_contains(
      error_of([&] { ab_plot_svg(series, "t"); }),
      fn + "series \"sharded\": expected 5 step times (one per loss), got 6");
  expect_contains(
      error_of([] {
        ab_plot_svg({PlotSeries{"empty", {}, {}}}, "t");
      }),
      fn + "series \"empty\": expected at least one step, got none");
}

}  // namespace
}  // namespace train
}  // namespace frameshard
