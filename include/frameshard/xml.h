// File: frameshard/xml.h
//
// Escaping for the SVG documents frameshard writes (`frameshard plan --svg`,
// the plot of `frameshard ab`): text and double- or single-quoted attribute
// values may then hold any workload name, cost label or title.
//
// Usage:
//   os << "<title>" << frameshard::xml_escape(title) << "</title>";
//   // "a<b & 'c'" -> "a&lt;b &amp; &apos;c&apos;"
//
// Pure function, thread-safe.
#pragma once

#include <string>

namespace frameshard {

/// Replaces & < > " ' by their XML entities.
std::string xml_escape(const std::string& text);

}  // namespace frameshard
