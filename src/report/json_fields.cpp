#include "report/json_fields.h"

#include "common/text.h"

namespace memseal::report {

using Json = nlohmann::ordered_json;

Json tensorJson(const TensorInfo& tensor) {
  if (!tensor.known) return nullptr;
  Json json = {{"shape", tensor.shape},
               {"dtype", tensor.dtype},
               {"requires_grad", tensor.requires_grad},
               {"is_leaf", tensor.is_leaf},
               {"grad_fn", tensor.grad_fn.empty() ? Json(nullptr) : Json(tensor.grad_fn)}};
  if (!tensor.device.empty()) json["device"] = tensor.device;  // absent: CPU memory
  return json;
}

Json framesJson(const std::vector<StackFrame>& frames) {
  Json json = Json::array();
  for (const StackFrame& frame : frames) {
    // "file" as recorded (absolute where the compiler or Python gave it so), "shown_file" as the
    // reports show it: relative to the directory the report was made in when under it.
    json.push_back({{"function", frame.function},
                    {"file", frame.file},
                    {"shown_file", common::shownPath(frame.file)},
                    {"line", frame.line},
                    {"library", frame.library},
                    {"internal", frame.is_internal}});
  }
  return json;
}

nlohmann::ordered_json rankJson(const RankIdentity& rank) {
  nlohmann::ordered_json json = {{"rank", rank.rank},
                                 {"local_rank", rank.local_rank},
                                 {"world_size", rank.world_size},
                                 {"run_id", rank.run_id}};
  // Only for a job across machines: a report of one machine's job reads as it always did.
  if (rank.nodes > 1) {
    if (rank.node >= 0) json["node"] = rank.node;
    json["nodes"] = rank.nodes;
  }
  return json;
}

nlohmann::ordered_json holderJson(const LeakHolder& holder) {
  return {{"finding", holder.finding},
          {"description", holder.description},
          {"kind", holder.kind},
          {"tensors", holder.tensors},
          {"via_graph", holder.via_graph}};
}

LeakHolder readHolder(const nlohmann::ordered_json& json, const std::string& where) {
  LeakHolder holder;
  holder.finding = read<int>(json, "finding", where);
  holder.description = read<std::string>(json, "description", where);
  holder.kind = readOr<std::string>(json, "kind", where, "unnamed");
  holder.tensors = readOr<std::uint32_t>(json, "tensors", where, 0);
  holder.via_graph = readOr<bool>(json, "via_graph", where, false);
  return holder;
}

RankIdentity readRank(const nlohmann::ordered_json& json, const std::string& where) {
  RankIdentity rank;
  rank.rank = read<int>(json, "rank", where);
  rank.local_rank = readOr<int>(json, "local_rank", where, rank.rank);
  rank.world_size = read<int>(json, "world_size", where);
  rank.run_id = readOr<std::string>(json, "run_id", where, "");
  rank.nodes = readOr<int>(json, "nodes", where, 1);
  rank.node = readOr<int>(json, "node", where, rank.nodes > 1 ? -1 : 0);
  if (rank.nodes < 1 || rank.nodes > rank.world_size || rank.node < -1 || rank.node >= rank.nodes) {
    fail(where + ": node " + std::to_string(rank.node) + " of " + std::to_string(rank.nodes) +
         " is not a node of a job of world size " + std::to_string(rank.world_size));
  }
  if (rank.world_size < 1 || rank.world_size > kMaxWorldSize || rank.rank < 0 ||
      rank.rank >= rank.world_size || rank.local_rank < 0 || rank.local_rank >= kMaxWorldSize) {
    fail(where + ": rank " + std::to_string(rank.rank) + " of world size " +
         std::to_string(rank.world_size) + " is not a rank of such a job");
  }
  return rank;
}

}  // namespace memseal::report
