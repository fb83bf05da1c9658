// What memseal does as it loads, in each binary that carries its core (libmemseal, the Python
// module, `memseal run`'s runtime): wire the layers that a lower one may not name. Track's CUDA
// ledger writes an out-of-memory's forensics through the writer report/ installs here.
#include "report/cuda_oom.h"

namespace {

const bool g_out_of_memory_writer_installed = (memseal::report::installOutOfMemoryWriter(), true);

}  // namespace
