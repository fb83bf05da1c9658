#include "report/pickle_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memseal::report {

namespace {

using Json = nlohmann::json;

// Nesting a pickle may build before it is refused: deep enough for any snapshot, shallow enough
// that writing the JSON back never runs out of stack.
constexpr std::size_t kMostNesting = 256;

// A value being built, with how deep it nests and how many values it holds (itself included):
// a pickle that refers back to what it built can make a value far larger than its bytes.
struct Value {
  Json json;
  std::size_t depth = 0;
  std::size_t nodes = 1;
};

class PlainUnpickler {
 public:
  explicit PlainUnpickler(const std::string& bytes)
      : bytes_(bytes), most_copied_nodes_(32 * bytes.size() + 4096) {}

  Json run() {
    while (true) {
      std::size_t at = position_;
      auto opcode = static_cast<unsigned char>(next(1)[0]);
      if (opcode == '.') break;  // STOP
      step(opcode, at);
    }
    if (stack_.size() != 1 || !marks_.empty()) fail("a pickle that does not end with one value");
    return std::move(stack_.back().json);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("not a snapshot pickle: " + what);
  }

  const char* next(std::size_t count) {
    if (count > bytes_.size() - position_) fail("cut short at byte " + std::to_string(position_));
    const char* at = bytes_.data() + position_;
    position_ += count;
    return at;
  }

  std::uint64_t little(std::size_t count) {
    const char* at = next(count);
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < count; ++i) {
      value |= std::uint64_t(static_cast<unsigned char>(at[i])) << (8 * i);
    }
    return value;
  }

  void push(Json json) { push(Value{std::move(json)}); }

  void push(Value value) {
    if (stack_.size() > bytes_.size()) fail("more values than bytes");
    stack_.push_back(std::move(value));
  }

  // A copy of a value built before (a memo entry), counted against what the bytes can make.
  void pushCopy(const Value& value) {
    copied_nodes_ += value.nodes;
    if (copied_nodes_ > most_copied_nodes_) fail("it refers back to what it built too often");
    push(value);
  }

  // The values from stack slot `from` on, taken off the stack. A dict or list memoized while it
  // was filled is memoized as it is now, complete.
  std::vector<Value> takeFrom(std::size_t from) {
    std::vector<Value> values;
    for (std::size_t slot = from; slot < stack_.size(); ++slot) {
      auto pending = pending_.find(slot);
      if (pending != pending_.end()) {
        for (std::uint64_t index : pending->second) {
          memo_[index] = stack_[slot];
          memo_slot_.erase(index);
        }
        pending_.erase(pending);
      }
      values.push_back(std::move(stack_[slot]));
    }
    stack_.resize(from);
    return values;
  }

  void needsValues(std::size_t count) const {
    std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + count) {
      fail("an opcode with too few values before it at byte " + std::to_string(position_));
    }
  }

  Value pop() {
    needsValues(1);
    return std::move(takeFrom(stack_.size() - 1).front());
  }

  // The values since the last MARK, which is dropped.
  std::vector<Value> sinceMark() {
    if (marks_.empty()) fail("no MARK before byte " + std::to_string(position_));
    std::size_t mark = marks_.back();
    marks_.pop_back();
    return takeFrom(mark);
  }

  Value& top() {
    needsValues(1);
    return stack_.back();
  }

  // `item` goes into `container`: how deep and large that makes it.
  void holds(Value& container, const Value& item) {
    container.depth = std::max(container.depth, item.depth + 1);
    container.nodes += item.nodes;
    if (container.depth > kMostNesting) fail("nested too deep");
  }

  static std::string keyText(const Json& key) {
    if (key.is_string()) return key.get<std::string>();
    if (key.is_number_integer()) return key.dump();
    throw std::invalid_argument("not a snapshot pickle: a dict key that is not a string or number");
  }

  void setItems(std::vector<Value> pairs) {
    if (pairs.size() % 2 != 0) fail("SETITEMS with an odd number of values");
    Value& dict = top();
    if (!dict.json.is_object()) fail("SETITEMS on something that is not a dict");
    for (std::size_t i = 0; i < pairs.size(); i += 2) {
      holds(dict, pairs[i + 1]);
      dict.json[keyText(pairs[i].json)] = std::move(pairs[i + 1].json);
    }
  }

  void appendItems(std::vector<Value> items) {
    Value& list = top();
    if (!list.json.is_array()) fail("APPENDS on something that is not a list");
    for (Value& item : items) {
      holds(list, item);
      list.json.push_back(std::move(item.json));
    }
  }

  void tuple(std::vector<Value> items) {
    Value made{Json::array()};
    for (Value& item : items) {
      holds(made, item);
      made.json.push_back(std::move(item.json));
    }
    push(std::move(made));
  }

  void tupleOf(std::size_t count) {
    needsValues(count);
    tuple(takeFrom(stack_.size() - count));
  }

  void memoGet(std::uint64_t index) {
    auto slot = memo_slot_.find(index);
    if (slot != memo_slot_.end()) {
      pushCopy(stack_[slot->second]);
      return;
    }
    auto value = memo_.find(index);
    if (value == memo_.end()) fail("a memo entry never put, at byte " + std::to_string(position_));
    pushCopy(value->second);
  }

  // A dict or list is memoized empty and filled after: it is memoized when it leaves the stack.
  void memoPut(std::uint64_t index) {
    const Value& value = top();
    if (value.json.is_structured()) {
      memo_slot_[index] = stack_.size() - 1;
      pending_[stack_.size() - 1].push_back(index);
      memo_[index] = Value{nullptr};
    } else {
      memo_[index] = value;
    }
  }

  std::int64_t longValue(std::size_t count) {
    if (count > 8) fail("an integer beyond 64 bits");
    std::uint64_t value = little(count);
    if (count > 0 && count < 8 && (value >> (8 * count - 1)) != 0) {
      value |= ~std::uint64_t{0} << (8 * count);  // negative: sign-extended
    }
    return static_cast<std::int64_t>(value);
  }

  void text(std::size_t count) { push(Json(std::string(next(count), count))); }

  bool scalar(unsigned char opcode);
  void step(unsigned char opcode, std::size_t at);

  const std::string& bytes_;
  std::size_t position_ = 0;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Value> memo_;
  std::unordered_map<std::uint64_t, std::size_t> memo_slot_;  // memoized, still on the stack
  std::unordered_map<std::size_t, std::vector<std::uint64_t>> pending_;  // by stack slot
  std::size_t copied_nodes_ = 0;
  const std::size_t most_copied_nodes_;
};

// One value from the bytes (a string, a number, true, false, None); false for another opcode.
bool PlainUnpickler::scalar(unsigned char opcode) {
  switch (opcode) {
    case 0x8c:
      text(little(1));
      return true;  // SHORT_BINUNICODE
    case 'X':
      text(little(4));
      return true;  // BINUNICODE
    case 0x8d:
      text(little(8));
      return true;  // BINUNICODE8
    case 'K':
      push(Json(little(1)));
      return true;  // BININT1
    case 'M':
      push(Json(little(2)));
      return true;  // BININT2
    case 'J':
      push(Json(static_cast<std::int32_t>(little(4))));
      return true;  // BININT
    case 0x8a:
      push(Json(longValue(little(1))));
      return true;  // LONG1
    case 'G': {     // BINFLOAT, big-endian
      const char* raw = next(8);
      std::uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(raw[i]);
      double value;
      std::memcpy(&value, &bits, sizeof(value));
      push(Json(value));
      return true;
    }
    case 0x88:
      push(Json(true));
      return true;  // NEWTRUE
    case 0x89:
      push(Json(false));
      return true;  // NEWFALSE
    case 'N':
      push(Json(nullptr));
      return true;
    default:
      return false;
  }
}

void PlainUnpickler::step(unsigned char opcode, std::size_t at) {
  if (scalar(opcode)) return;
  switch (opcode) {
    case 0x80:
      next(1);
      break;  // PROTO
    case 0x95:
      next(8);
      break;  // FRAME: the frame's length, read on through it
    case '}':
      push(Json::object());
      break;
    case ']':
      push(Json::array());
      break;
    case ')':
      push(Json::array());
      break;  // EMPTY_TUPLE
    case '(':
      if (marks_.size() >= kMostNesting) fail("nested too deep");
      marks_.push_back(stack_.size());
      break;
    case 's': {  // SETITEM
      Value value = pop();
      Value key = pop();
      std::vector<Value> pair;
      pair.push_back(std::move(key));
      pair.push_back(std::move(value));
      setItems(std::move(pair));
      break;
    }
    case 'u':
      setItems(sinceMark());
      break;
    case 'a': {  // APPEND
      std::vector<Value> item;
      item.push_back(pop());
      appendItems(std::move(item));
      break;
    }
    case 'e':
      appendItems(sinceMark());
      break;
    case 't':
      tuple(sinceMark());
      break;  // TUPLE
    case 0x85:
      tupleOf(1);
      break;
    case 0x86:
      tupleOf(2);
      break;
    case 0x87:
      tupleOf(3);
      break;
    case 0x94:
      memoPut(memo_.size());
      break;  // MEMOIZE
    case 'q':
      memoPut(little(1));
      break;  // BINPUT
    case 'r':
      memoPut(little(4));
      break;  // LONG_BINPUT
    case 'h':
      memoGet(little(1));
      break;  // BINGET
    case 'j':
      memoGet(little(4));
      break;  // LONG_BINGET
    default: {
      static const char* const kHex = "0123456789abcdef";
      fail(std::string("opcode 0x") + kHex[opcode >> 4] + kHex[opcode & 15] + " at byte " +
           std::to_string(at) + " is not plain data");
    }
  }
}

}  // namespace

nlohmann::json readPlainPickle(const std::string& bytes) {
  if (bytes.size() < 2 || static_cast<unsigned char>(bytes[0]) != 0x80) {
    throw std::invalid_argument("not a snapshot pickle: it does not begin as a pickle does");
  }
  return PlainUnpickler(bytes).run();
}

}  // namespace memseal::report
