// Reads a Python pickle of plain data (dicts, lists, tuples, strings, numbers, booleans, None) as
// JSON: the memory snapshots torch.cuda.memory._dump_snapshot writes (protocol 4 and later), and
// memseal's own (protocol 2, memory_viz.h). libtorch's unpickler reads protocol 2 only. Anything
// else a pickle can hold (classes, functions, bytes, sets) is refused: such a file is not a
// snapshot, and reading it must not run code.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace memseal::report {

// Values under a key of `dropped` are left out (a snapshot's stack frames, which are most of its
// bytes, where the reader does not need them). Memory stays proportional to the bytes: a value
// the pickle refers to again is held once while reading, and the JSON written is bounded (32
// values a byte). Throws std::invalid_argument saying what the bytes are not (not a pickle, an
// opcode it does not read and where, a pickle cut short, nested too deep). Dict keys become
// strings (a number's decimal text); a tuple is an array; an integer beyond 64 bits is refused.
nlohmann::json readPlainPickle(const std::string& bytes, const std::set<std::string>& dropped = {});

}  // namespace memseal::report
