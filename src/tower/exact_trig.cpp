// cos and sin from libm in double, element by element in one thread (see
// exact_trig.h for why not at::cos).
#include "tower/exact_trig.h"

#include "tower/check.h"

#include <cmath>

namespace frameshard {
namespace detail {

CosSin exact_cos_sin(const at::Tensor& angles) {
  FRAMESHARD_TORCH_CHECK(
      at::isFloatingType(angles.scalar_type()),
      "exact_cos_sin",
      "expected floating-point angles, got ",
      angles.scalar_type());
  const at::Tensor a = angles.to(at::kCPU).to(at::kDouble).contiguous();
  at::Tensor c = at::empty_like(a);
  at::Tensor s = at::empty_like(a);
  const double* ap = a.data_ptr<double>();
  double* cp = c.data_ptr<double>();
  double* sp = s.data_ptr<double>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    cp[i] = std::cos(ap[i]);
    sp[i] = std::sin(ap[i]);
  }
  return {c.to(angles.device()), s.to(angles.device())};
}

}  // namespace detail
}  // namespace frameshard
