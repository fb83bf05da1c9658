// The library's version, for `memseal --version` and for consumers to check at run time.
#include "memseal/version.h"

namespace memseal {

const char* version() { return MEMSEAL_VERSION; }

}  // namespace memseal
