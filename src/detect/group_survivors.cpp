#include "detect/group_survivors.h"

#include <algorithm>

#include "analyze/live_view.h"

namespace memseal::detect {

std::map<analyze::SurvivorKey, GroupSurvivors> groupSurvivors(
    const std::vector<StorageEvidence>& groups, std::uint32_t first, std::uint32_t last) {
  std::map<analyze::SurvivorKey, GroupSurvivors> survivors;
  std::map<analyze::SurvivorKey, const analyze::LiveItem*> best;
  std::vector<analyze::SurvivorKey> keys;
  for (const StorageEvidence& evidence : groups) keys.push_back(evidence.key);
  std::sort(keys.begin(), keys.end());
  std::vector<analyze::LiveItem> items = analyze::collectLive(
      [&](const track::LiveRecord& record) {
        return record.step >= first && record.step <= last &&
               std::binary_search(keys.begin(), keys.end(), analyze::survivorKeyOf(record));
      },
      analyze::LiveSet::kHeld);
  for (const analyze::LiveItem& item : items) {
    analyze::SurvivorKey key = analyze::survivorKeyOf(item.record);
    std::vector<const void*>& storages = survivors[key].storages;
    if (storages.size() < kStoragesPerGroup) storages.push_back(item.record.data);
    const analyze::LiveItem*& chosen = best[key];
    if (chosen == nullptr) {
      chosen = &item;
      continue;
    }
    bool has = item.tensor.defined();
    bool chosen_has = chosen->tensor.defined();
    if (has != chosen_has ? has : analyze::newerThan(item.record, chosen->record)) chosen = &item;
  }
  for (const auto& [key, item] : best) survivors[key].example = analyze::describeTensor(*item);
  // Read live, as the example is: only tensors this thread made (another thread may be changing
  // theirs).
  std::vector<const analyze::LiveItem*> newest_first;
  for (const analyze::LiveItem& item : items) {
    if (analyze::readableHere(item)) newest_first.push_back(&item);
  }
  std::sort(newest_first.begin(), newest_first.end(),
            [](const analyze::LiveItem* a, const analyze::LiveItem* b) {
              return analyze::newerThan(a->record, b->record);
            });
  for (const analyze::LiveItem* item : newest_first) {
    std::vector<track::NodeRef>& graphs =
        survivors[analyze::survivorKeyOf(item->record)].kept_graphs;
    if (graphs.size() >= kKeptGraphsWalked) continue;
    at::Tensor tensor(item->tensor);
    if (const track::NodeRef& grad_fn = tensor.grad_fn()) graphs.push_back(grad_fn);
  }
  return survivors;
}

bool heldByGraphs(const GroupSurvivors& group, const analyze::RetainedGraphs& graphs) {
  if (group.storages.empty() || graphs.held_storage.empty()) return false;
  std::size_t held = 0;
  for (const void* storage : group.storages) held += graphs.held_storage.count(storage);
  return held * 2 >= group.storages.size();
}

}  // namespace memseal::detect
