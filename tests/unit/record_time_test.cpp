// A record's time: the thread's coarse clock read again at each new step and after a fixed number
// of records, so most records cost no clock call at all.
#include <gtest/gtest.h>

#include "track/record_context.h"

namespace memseal::track {
namespace {

struct CountingClock {
  int reads = 0;
  std::int64_t now = 1000;
  std::int64_t operator()() {
    ++reads;
    return now;
  }
};

TEST(RecordTime, TheClockIsReadOnceEveryFewRecordsOfAStep) {
  ThreadState state{};
  CountingClock clock;
  for (std::uint32_t i = 0; i < 3 * kRecordsPerClockRead; ++i) {
    recordTimeNs(state, 7, [&] { return clock(); });
  }
  EXPECT_EQ(clock.reads, 3);
}

TEST(RecordTime, ANewStepReadsTheClockAgain) {
  ThreadState state{};
  CountingClock clock;
  EXPECT_EQ(recordTimeNs(state, 1, [&] { return clock(); }), 1000);
  clock.now = 5000;  // time passes; the same step keeps the time it read
  EXPECT_EQ(recordTimeNs(state, 1, [&] { return clock(); }), 1000);
  EXPECT_EQ(recordTimeNs(state, 2, [&] { return clock(); }), 5000);
  EXPECT_EQ(clock.reads, 2);
}

TEST(RecordTime, RecordsBetweenTwoReadsShareTheEarlierTime) {
  ThreadState state{};
  CountingClock clock;
  std::int64_t last = 0;
  for (std::uint32_t i = 0; i < kRecordsPerClockRead + 1; ++i) {
    clock.now = 1000 + i;
    last = recordTimeNs(state, 3, [&] { return clock(); });
  }
  // The first record read 1000; the one after kRecordsPerClockRead records read the clock again.
  EXPECT_EQ(last, 1000 + static_cast<std::int64_t>(kRecordsPerClockRead));
  EXPECT_EQ(clock.reads, 2);
}

}  // namespace
}  // namespace memseal::track
