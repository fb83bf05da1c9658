#include "report/pickle_reader.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memseal::report {

namespace {

using Json = nlohmann::json;

// Nesting written back as JSON before it is refused: deep enough for any snapshot, shallow
// enough that writing the JSON never runs out of stack (and a list that holds itself ends).
constexpr std::size_t kMostNesting = 256;

// A value as the pickle builds it: a dict or list holds its items by reference, as Python does,
// so a value referred to again (its memo entry: a snapshot's stack frames, shared by thousands of
// entries) costs one pointer, not a copy.
struct Node {
  enum class Kind { kScalar, kList, kDict };
  Kind kind = Kind::kScalar;
  Json scalar;
  std::vector<std::shared_ptr<Node>> items;                            // a list's or tuple's
  std::vector<std::pair<std::string, std::shared_ptr<Node>>> entries;  // a dict's, in order
};
using NodePtr = std::shared_ptr<Node>;

NodePtr scalarNode(Json value) {
  auto node = std::make_shared<Node>();
  node->scalar = std::move(value);
  return node;
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("not a snapshot pickle: " + what);
}

class PlainUnpickler {
 public:
  PlainUnpickler(const std::string& bytes, const std::set<std::string>& dropped)
      : bytes_(bytes), dropped_(dropped) {}
  PlainUnpickler(const PlainUnpickler&) = delete;
  PlainUnpickler& operator=(const PlainUnpickler&) = delete;
  // A pickle can put a list inside itself (through its memo): every container lets go of its
  // items, so that such a cycle is freed too.
  ~PlainUnpickler() {
    for (const NodePtr& container : containers_) {
      container->items.clear();
      container->entries.clear();
    }
  }

  NodePtr run() {
    while (true) {
      std::size_t at = position_;
      auto opcode = static_cast<unsigned char>(next(1)[0]);
      if (opcode == '.') break;  // STOP
      step(opcode, at);
    }
    if (stack_.size() != 1 || !marks_.empty()) fail("a pickle that does not end with one value");
    return stack_.back();
  }

 private:
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

  NodePtr containerNode(Node::Kind kind) {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    containers_.push_back(node);
    return node;
  }

  void push(NodePtr node) {
    if (stack_.size() > bytes_.size()) fail("more values than bytes");
    stack_.push_back(std::move(node));
  }
  void push(Json value) { push(scalarNode(std::move(value))); }

  void needsValues(std::size_t count) const {
    std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + count) {
      fail("an opcode with too few values before it at byte " + std::to_string(position_));
    }
  }

  // The values from stack slot `from` on, taken off the stack.
  std::vector<NodePtr> takeFrom(std::size_t from) {
    std::vector<NodePtr> values(stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    return values;
  }

  std::vector<NodePtr> take(std::size_t count) {
    needsValues(count);
    return takeFrom(stack_.size() - count);
  }

  // The values since the last MARK, which is dropped.
  std::vector<NodePtr> sinceMark() {
    if (marks_.empty()) fail("no MARK before byte " + std::to_string(position_));
    std::size_t mark = marks_.back();
    marks_.pop_back();
    return takeFrom(mark);
  }

  Node& top(Node::Kind kind, const char* opcode) {
    needsValues(1);
    if (stack_.back()->kind != kind) {
      fail(std::string(opcode) + " on something that is not a " +
           (kind == Node::Kind::kDict ? "dict" : "list"));
    }
    return *stack_.back();
  }

  void setItems(const std::vector<NodePtr>& pairs) {
    if (pairs.size() % 2 != 0) fail("SETITEMS with an odd number of values");
    Node& dict = top(Node::Kind::kDict, "SETITEMS");
    for (std::size_t i = 0; i < pairs.size(); i += 2) {
      const Node& key = *pairs[i];
      if (key.kind != Node::Kind::kScalar ||
          !(key.scalar.is_string() || key.scalar.is_number_integer())) {
        fail("a dict key that is not a string or number");
      }
      std::string text = key.scalar.is_string() ? key.scalar.get<std::string>() : key.scalar.dump();
      if (dropped_.count(text) == 0) dict.entries.emplace_back(std::move(text), pairs[i + 1]);
    }
  }

  void appendItems(const std::vector<NodePtr>& items) {
    Node& list = top(Node::Kind::kList, "APPENDS");
    list.items.insert(list.items.end(), items.begin(), items.end());
  }

  void tuple(std::vector<NodePtr> items) {
    NodePtr made = containerNode(Node::Kind::kList);
    made->items = std::move(items);
    push(std::move(made));
  }

  void memoGet(std::uint64_t index) {
    auto value = memo_.find(index);
    if (value == memo_.end()) fail("a memo entry never put, at byte " + std::to_string(position_));
    push(value->second);
  }

  void memoPut(std::uint64_t index) {
    needsValues(1);
    memo_[index] = stack_.back();
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
  const std::set<std::string>& dropped_;  // not kept: freed as soon as they are set
  std::size_t position_ = 0;
  std::vector<NodePtr> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, NodePtr> memo_;
  std::vector<NodePtr> containers_;
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
      push(containerNode(Node::Kind::kDict));
      break;
    case ']':
      push(containerNode(Node::Kind::kList));
      break;
    case ')':
      push(containerNode(Node::Kind::kList));
      break;  // EMPTY_TUPLE
    case '(':
      if (marks_.size() >= kMostNesting) fail("nested too deep");
      marks_.push_back(stack_.size());
      break;
    case 's':
      setItems(take(2));
      break;  // SETITEM
    case 'u':
      setItems(sinceMark());
      break;
    case 'a':
      appendItems(take(1));
      break;  // APPEND
    case 'e':
      appendItems(sinceMark());
      break;
    case 't':
      tuple(sinceMark());
      break;  // TUPLE
    case 0x85:
      tuple(take(1));
      break;
    case 0x86:
      tuple(take(2));
      break;
    case 0x87:
      tuple(take(3));
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

// The node tree as JSON. A value referred to from several places is written at each: the values
// written are bounded by the input's size.
class JsonWriter {
 public:
  explicit JsonWriter(std::size_t input_bytes) : most_values_(32 * input_bytes + 4096) {}

  Json write(const Node& node, std::size_t depth) {
    if (depth > kMostNesting) fail("nested too deep");
    if (++values_ > most_values_) fail("it refers back to what it built too often");
    switch (node.kind) {
      case Node::Kind::kScalar:
        return node.scalar;
      case Node::Kind::kList: {
        Json list = Json::array();
        for (const NodePtr& item : node.items) list.push_back(write(*item, depth + 1));
        return list;
      }
      case Node::Kind::kDict: {
        Json dict = Json::object();
        for (const auto& [key, value] : node.entries) dict[key] = write(*value, depth + 1);
        return dict;
      }
    }
    return nullptr;
  }

 private:
  std::size_t values_ = 0;
  const std::size_t most_values_;
};

}  // namespace

nlohmann::json readPlainPickle(const std::string& bytes, const std::set<std::string>& dropped) {
  if (bytes.size() < 2 || static_cast<unsigned char>(bytes[0]) != 0x80) {
    throw std::invalid_argument("not a snapshot pickle: it does not begin as a pickle does");
  }
  PlainUnpickler unpickler(bytes, dropped);
  NodePtr root = unpickler.run();
  return JsonWriter(bytes.size()).write(*root, 0);
}

}  // namespace memseal::report
