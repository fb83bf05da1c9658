// CudaRegion where libtorch has no CUDA: the same API, which says so (plan/cuda/ has the real one).
#include "memseal/cuda_region.h"

#if !defined(MEMSEAL_WITH_CUDA)

#include <stdexcept>

namespace memseal {

struct CudaRegion::Impl {};

bool CudaRegion::available() { return false; }

CudaRegion::CudaRegion(CudaRegionOptions) {
  throw std::runtime_error(
      "memseal: CudaRegion needs a libtorch built with CUDA; this memseal was built against a "
      "CPU-only libtorch (CPU inference: use memseal::PlannedArena)");
}

CudaRegion::~CudaRegion() = default;

void CudaRegion::run(const std::string&, c10::function_ref<void()>) {}
void CudaRegion::run(at::TensorList, c10::function_ref<void()>) {}
CudaRegionStats CudaRegion::stats() const { return {}; }
int CudaRegion::device() const { return -1; }

}  // namespace memseal

#endif
