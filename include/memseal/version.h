// memseal's version and the libtorch version it was built against.
#pragma once

#include "memseal/export.h"

namespace memseal {

MEMSEAL_API const char* version();

}  // namespace memseal
