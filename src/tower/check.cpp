#include "tower/check.h"

namespace frameshard {
namespace detail {

std::string exception_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "an unknown exception";
  }
}

}  // namespace detail
}  // namespace frameshard
