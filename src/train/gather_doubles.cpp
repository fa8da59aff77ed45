// One all-gather of a record of doubles per rank (gather_doubles.h).
#include "train/gather_doubles.h"

#include <ATen/ATen.h>

namespace frameshard {
namespace train {
namespace detail {

std::vector<double> all_gather_doubles(
    const std::vector<double>& mine, const ProcessGroupPtr& group) {
  const int64_t size = group ? group->getSize() : 1;
  if (size == 1) {
    return mine;
  }
  const at::Tensor local =
      at::tensor(mine, at::TensorOptions().dtype(at::kDouble));
  std::vector<std::vector<at::Tensor>> out(1);
  for (int64_t q = 0; q < size; ++q) {
    out[0].push_back(at::empty_like(local));
  }
  std::vector<at::Tensor> in{local};
  group->allgather(out, in)->wait();
  std::vector<double> all;
  all.reserve(static_cast<size_t>(size) * mine.size());
  for (const at::Tensor& t : out[0]) {
    const double* v = t.data_ptr<double>();
    all.insert(all.end(), v, v + mine.size());
  }
  return all;
}

}  // namespace detail
}  // namespace train
}  // namespace frameshard
