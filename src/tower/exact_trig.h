// !!! Internal header of the LibTorch layers (tower, models, train). !!!
//
// cos and sin of a tensor of angles from libm in double, in one thread:
// the rotary tables of the towers and of the A/B's decoder. torch's CPU cos
// of a tensor large enough to run in two threads was measured to come out
// of one thread's chunk about 1.5e-4 off (4 of 75 fresh two-thread
// processes on a loaded 2-core machine; sin of the same tensor right after
// was exact), which flipped a parity check; libm's double cos and sin,
// rounded once to the caller's dtype, are the correctly rounded values of
// the float angles on every run.
//
// Usage:
//   const CosSin t = exact_cos_sin(angles);   // angles: any float tensor
//   at::Tensor cos = t.cos.to(dtype);         // double, on angles' device
#pragma once

#include <ATen/ATen.h>

namespace frameshard {
namespace detail {

/// cos and sin of every element of `angles` (float, double or half types;
/// any device: the values pass through the CPU), as float64 tensors of the
/// same shape on angles' device.
struct CosSin {
  at::Tensor cos;
  at::Tensor sin;
};

CosSin exact_cos_sin(const at::Tensor& angles);

}  // namespace detail
}  // namespace frameshard
