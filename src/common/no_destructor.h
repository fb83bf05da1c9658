// A process-wide object that is built at compile time and never destroyed. The hot path's tables
// and counters are reached on every allocation: a function-local `static T* x = new T()` costs a
// guard check each time and puts its first-call code beside the hot code. Here the object is
// constant-initialised (T needs a constexpr default constructor), so reaching it is an address;
// and tensors freed during static destruction still find it, since its destructor never runs.
#pragma once

namespace memseal {

template <typename T>
class NoDestructor {
 public:
  constexpr NoDestructor() : value_() {}
  ~NoDestructor() {}  // the union member's destructor is not called
  NoDestructor(const NoDestructor&) = delete;
  NoDestructor& operator=(const NoDestructor&) = delete;

  T& get() { return value_; }
  const T& get() const { return value_; }

 private:
  union {
    T value_;
  };
};

}  // namespace memseal
