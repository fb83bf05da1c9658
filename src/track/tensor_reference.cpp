// Weak references keep a TensorImpl's memory (not its storage) until the record goes, so a record
// can tell whether its tensor is still alive without keeping it alive.
#include "track/tensor_reference.h"

#include <ATen/core/TensorBase.h>

#include "track/autograd_node.h"
#include "track/site_table.h"

namespace memseal::track {

void takeWeakTensorReference(c10::TensorImpl* tensor) {
  c10::raw::weak_intrusive_ptr::incref(tensor);
}

void dropWeakTensorReference(c10::TensorImpl* tensor) {
  c10::weak_intrusive_ptr<c10::TensorImpl>::reclaim(tensor);  // its destructor drops the reference
}

c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> lockWeakTensorReference(
    c10::TensorImpl* tensor) {
  auto weak = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(tensor);
  auto strong = weak.lock();
  weak.release();  // the record keeps its weak reference
  return strong;
}

TensorSignature signatureOf(const at::TensorBase& tensor) {
  TensorSignature signature;
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  c10::IntArrayRef sizes = impl->sizes();
  signature.dims = static_cast<std::int8_t>(sizes.size() > 127 ? 127 : sizes.size());
  for (std::size_t i = 0; i < sizes.size() && i < static_cast<std::size_t>(kMaxCachedDims); ++i) {
    signature.sizes[i] = sizes[i];
  }
  signature.scalar_type = static_cast<std::int8_t>(c10::typeMetaToScalarType(impl->dtype()));
  signature.requires_grad = impl->requires_grad();
  const NodeRef& grad_fn = tensor.grad_fn();
  signature.is_leaf = grad_fn == nullptr;
  if (grad_fn != nullptr) signature.grad_fn_name = siteTable().gradFnNameId(*grad_fn);
  return signature;
}

}  // namespace memseal::track
