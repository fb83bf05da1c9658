// The tensor behind a live allocation: the weak reference a record holds on it, and its signature
// (shape, dtype, autograd state) read when the op that made it returns.
#pragma once

#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>

#include "track/live_record.h"

namespace at {
class TensorBase;
}

namespace memseal::track {

// Takes and drops a record's weak reference on a tensor.
void takeWeakTensorReference(c10::TensorImpl* tensor);
void dropWeakTensorReference(c10::TensorImpl* tensor);
// A strong reference through a record's weak one; undefined when the tensor is gone.
c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> lockWeakTensorReference(
    c10::TensorImpl* tensor);

// Reads the tensor's current metadata (at op end, and during analysis on the owning thread).
TensorSignature signatureOf(const at::TensorBase& tensor);

}  // namespace memseal::track
