// Which torch a program would run with, so that memseal can refuse before it starts one whose
// libtorch is not the one memseal was built against (its runtime, injected into that process,
// would be bound to another libtorch's ABI).
#pragma once

#include <string>

namespace memseal::cli {

// The torch version recorded next to a libtorch lib/ directory (torch/version.py in the wheel),
// or empty.
std::string torchVersionBeside(const std::string& lib_dir);
// The same, of the torch package folder itself (its version.py).
std::string torchPackageVersion(const std::string& package_dir);

// "2.11.0+cu130" -> "2.11.0": builds of one release share the ABI memseal relies on.
std::string torchRelease(const std::string& version);

// For a Python program (python..., or a script whose #! line runs one): the folder of the torch
// package that interpreter imports, found without importing it; empty when it is no Python program,
// has no torch, or cannot be asked.
std::string pythonTorchFolder(const std::string& program);

// A sentence saying why `program` cannot be run under this memseal (its Python imports another
// torch release than `built_with`), or empty.
std::string torchMismatch(const std::string& program, const std::string& built_with);

}  // namespace memseal::cli
