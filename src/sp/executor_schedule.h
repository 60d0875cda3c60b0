// The order in which one rank's thread issues its plan: a per-rank sequence of actions that
// cannot deadlock when every rank runs its own sequence on one thread, with blocking
// receives, barriers and signal waits and buffered (non-blocking) sends. This is how the cpu
// backend runs a plan (its streams run inline, so a rank has one thread for all its streams),
// and the cuda executor enqueues in the same order so host-side NCCL calls meet in a
// consistent order too.
//
// Every step has a start action; steps that wait for other ranks also have an end action:
//   kSendRecv, kAllToAll  start: post the sends;        end: receive (blocking)
//   kBarrier              start: arrive (raise peers);  end: wait for every member
//   kWait                 start: nothing;               end: wait for the signal
// Every other step runs whole at its start (put, get and signal do not wait for peers).
//
// How: the plan is run abstractly with its semantics (streams in order, deps, a two-sided
// step ends once all its partners started, a collective or barrier once all members started,
// a wait once its raises happened), numbering every start and end as it happens. The members
// of one collective or barrier end with one shared number. Each rank's actions, in number
// order, only ever block on actions with a smaller number (a send posted, a signal raised) or
// on the same collective end of the other members; so the smallest action not yet done can
// always proceed, whatever the threads' speeds, and the ranks never deadlock.
#pragma once

#include <vector>

#include "tessera/sp/plan.h"

namespace tessera::sp::detail {

struct ScheduledAction {
  int step = 0;
  bool end = false;  // false: the step's start
};

// Per rank, its actions in issue order. Throws kInternal when the plan cannot complete (the
// validator rejects such plans first).
std::vector<std::vector<ScheduledAction>> schedule_plan(const Plan& plan);

// Whether a step of this kind has an end action (it waits for other ranks).
bool has_end_action(StepKind kind);

}  // namespace tessera::sp::detail
