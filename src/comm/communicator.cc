// Backend-independent parts of the Communicator: reduce-op names, the group layouts of the
// sequence-parallel methods, and split_groups() on top of each backend's split().
//
// split_groups() checks that every rank passed the same groups without any collective other
// than split(): a first split with color = a hash of the whole group list puts every rank
// into a group of the ranks that agree with it, so the group is the full communicator on
// every rank exactly when all ranks agree (a hash collision is the only way to miss).
#include "tessera/comm/communicator.h"

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/error.h"

namespace tessera {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "unknown";
}

namespace {

std::string group_text(const std::vector<int>& group) {
  std::string s = "{";
  for (size_t i = 0; i < group.size(); ++i) s += str(i ? ", " : "", group[i]);
  return s + "}";
}

// FNV-1a over the group sizes and members, folded to a non-negative 30-bit split color.
int groups_fingerprint(const std::vector<std::vector<int>>& groups) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(groups.size());
  for (const auto& g : groups) {
    mix(g.size());
    for (int r : g) mix(uint64_t(uint32_t(r)));
  }
  return int((h ^ (h >> 30) ^ (h >> 60)) & 0x3fffffff);
}

void check_group_layout(int world_size, int group_size, const char* what) {
  TESSERA_CHECK_ARG(world_size >= 1, "world_size = ", world_size, ": expected >= 1");
  TESSERA_CHECK_ARG(group_size >= 1, what, " = ", group_size, ": expected >= 1");
  TESSERA_CHECK_ARG(world_size % group_size == 0, what, " = ", group_size,
                    ": expected a divisor of world_size = ", world_size);
}

}  // namespace

std::unique_ptr<Communicator> Communicator::split_groups(
    const std::vector<std::vector<int>>& groups, const std::string& name) {
  const int n = size();
  const int me = rank();
  // Local validation: every rank sees the same list, so every rank throws the same error.
  std::vector<int> group_of(n, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    TESSERA_CHECK_ARG(!groups[g].empty(), "split_groups('", name, "'): groups[", g,
                      "] is empty: expected at least one rank");
    for (int r : groups[g]) {
      TESSERA_CHECK_ARG(r >= 0 && r < n, "split_groups('", name, "'): groups[", g,
                        "] = ", group_text(groups[g]), " holds rank ", r, ": expected ranks 0..",
                        n - 1, " of communicator '", this->name(), "'");
      TESSERA_CHECK_ARG(group_of[r] < 0, "split_groups('", name, "'): rank ", r,
                        " is repeated (groups[", group_of[r], "] and groups[", g,
                        "]): expected disjoint groups");
      group_of[r] = int(g);
    }
  }

  // Agreement check: ranks with the same list land in one group; any disagreement makes
  // every rank's group smaller than the communicator.
  {
    std::unique_ptr<Communicator> agreeing =
        split(groups_fingerprint(groups), me, str(name, ".check"));
    TESSERA_CHECK(agreeing != nullptr && agreeing->size() == n, ErrorCode::kInvalidArgument,
                  "split_groups('", name, "'): ranks passed different groups: only ",
                  agreeing ? agreeing->size() : 0, " of ", n, " ranks of communicator '",
                  this->name(), "' passed the same list as rank ", me,
                  "; expected every rank to pass the same groups");
  }

  const int color = group_of[me];
  int key = 0;
  std::string group_name = name;
  if (color >= 0) {
    const auto& g = groups[color];
    for (size_t i = 0; i < g.size(); ++i) {
      if (g[i] == me) key = int(i);
    }
    group_name = str(name, "[");
    for (size_t i = 0; i < g.size(); ++i) group_name += str(i ? "," : "", global_rank(g[i]));
    group_name += "]";
  }
  std::unique_ptr<Communicator> mine = split(color, key, group_name);
  if (color < 0) return nullptr;
  TESSERA_CHECK(mine != nullptr && mine->size() == int(groups[color].size()), ErrorCode::kInternal,
                "split_groups('", name, "'): split returned a group of ", mine ? mine->size() : 0,
                " ranks for groups[", color, "] = ", group_text(groups[color]));
  return mine;
}

std::vector<std::vector<int>> contiguous_groups(int world_size, int group_size, const char* what) {
  check_group_layout(world_size, group_size, what);
  std::vector<std::vector<int>> groups(world_size / group_size);
  for (int r = 0; r < world_size; ++r) groups[r / group_size].push_back(r);
  return groups;
}

std::vector<std::vector<int>> strided_groups(int world_size, int group_size, const char* what) {
  check_group_layout(world_size, group_size, what);
  const int num_groups = world_size / group_size;
  std::vector<std::vector<int>> groups(num_groups);
  for (int r = 0; r < world_size; ++r) groups[r % num_groups].push_back(r);
  return groups;
}

}  // namespace tessera
