// XML escaping of the SVGs' text (frameshard/xml.h).
#include <frameshard/xml.h>

#include <gtest/gtest.h>

namespace frameshard {
namespace {

TEST(Xml, EscapesTheFiveSpecialCharactersAndNothingElse) {
  EXPECT_EQ(
      xml_escape("a<b & \"c\" > 'd'"),
      "a&lt;b &amp; &quot;c&quot; &gt; &apos;d&apos;");
  EXPECT_EQ(xml_escape("cp 2, alpha=6608 (auto)"), "cp 2, alpha=6608 (auto)");
  EXPECT_EQ(xml_escape(""), "");
}

}  // namespace
}  // namespace frameshard
