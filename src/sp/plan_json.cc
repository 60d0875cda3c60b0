// to_json(Plan): the whole plan as one JSON object, for `tessera plan`, tests and tools that
// draw timelines. Field names follow plan.h.
#include "json_writer.h"
#include "tessera/sp/plan.h"

namespace tessera::sp {

namespace {

using detail::JsonWriter;

void write_region(JsonWriter& w, const Region& r) {
  w.begin_array().value(r.row_begin).value(r.row_count).value(r.head_begin).value(r.head_count);
  w.end_array();
}

void write_ref(JsonWriter& w, const SlotRef& ref) {
  w.begin_object().member("slot", ref.slot).key("region");
  write_region(w, ref.region);
  w.end_object();
}

void write_run(JsonWriter& w, const TokenRun& run) {
  w.begin_array().value(run.start).value(run.stride).value(run.count).end_array();
}

void write_operand(JsonWriter& w, const AttnOperand& op) {
  w.begin_object().member("slot", op.ref.slot).key("region");
  write_region(w, op.ref.region);
  w.key("positions");
  write_run(w, op.positions);
  w.member("first_head", op.first_head).end_object();
}

void write_transfer(JsonWriter& w, const Transfer& t) {
  w.begin_object().member("id", t.id).member("src_rank", t.src_rank).key("src");
  write_ref(w, t.src);
  w.member("dst_rank", t.dst_rank).key("dst");
  write_ref(w, t.dst);
  w.member("link", link_class_name(t.link)).member("bytes", t.bytes).end_object();
}

void write_step(JsonWriter& w, int index, const Step& s) {
  w.begin_object().member("index", index).member("kind", step_kind_name(s.kind));
  w.member("stream", s.stream).key("deps").int_array(s.deps);
  if (!s.note.empty()) w.member("note", s.note);
  switch (s.kind) {
    case StepKind::kSendRecv:
    case StepKind::kAllToAll:
    case StepKind::kPut:
    case StepKind::kGet:
      if (!s.group.empty()) w.key("group").int_array(s.group);
      w.key("transfers").begin_array();
      for (const Transfer& t : s.transfers) write_transfer(w, t);
      w.end_array();
      if (s.signal_id >= 0) w.member("signal", s.signal_id);
      break;
    case StepKind::kCompute: {
      const ComputeSpec& c = s.compute;
      w.key("q");
      write_operand(w, c.q);
      w.key("kv").begin_array();
      for (const AttnOperand& kv : c.kv) write_operand(w, kv);
      w.end_array();
      w.member("causal", c.causal).key("state");
      write_ref(w, c.state);
      w.member("accumulate", c.accumulate);
      break;
    }
    case StepKind::kMerge:
    case StepKind::kFinalize:
      w.key("src");
      write_ref(w, s.src);
      w.key("dst");
      write_ref(w, s.dst);
      if (s.kind == StepKind::kMerge) w.member("overwrite", s.overwrite);
      break;
    case StepKind::kSignal:
      w.member("signal", s.signal_id).member("signal_rank", s.signal_rank);
      break;
    case StepKind::kWait:
      w.member("signal", s.signal_id).member("value", s.signal_value);
      break;
    case StepKind::kBarrier:
      w.key("group").int_array(s.group);
      break;
  }
  w.end_object();
}

}  // namespace

std::string to_json(const Plan& plan) {
  JsonWriter w;
  w.begin_object();
  w.member("method", plan.method)
      .member("comm", comm_mode_name(plan.comm))
      .member("layout", token_layout_name(plan.layout));
  const AttentionShape& s = plan.shape;
  w.key("shape").begin_object();
  w.member("batch", s.batch).member("seq_len", s.seq_len).member("joint_tokens", s.joint_tokens);
  w.member("heads", s.heads).member("kv_heads", s.kv_heads).member("head_dim", s.head_dim);
  w.member("dtype", dtype_name(s.dtype)).member("partial_dtype", dtype_name(s.partial_dtype));
  w.member("causal", s.causal).end_object();
  w.member("world_size", plan.world_size).member("num_streams", plan.num_streams);
  w.key("machine_of_rank").int_array(plan.machine_of_rank);
  w.key("params").begin_object();
  for (const auto& [k, v] : plan.params) w.member(k, v);
  w.end_object();
  w.key("notes").begin_array();
  for (const std::string& n : plan.notes) w.value(n);
  w.end_array();
  w.key("ranks").begin_array();
  for (int r = 0; r < int(plan.ranks.size()); ++r) {
    const RankPlan& rp = plan.ranks[r];
    w.begin_object().member("rank", r).member("num_signals", rp.num_signals);
    w.key("slots").begin_array();
    for (int i = 0; i < int(rp.slots.size()); ++i) {
      const SlotDesc& slot = rp.slots[i];
      w.begin_object().member("id", i).member("name", slot.name);
      w.member("kind", slot_kind_name(slot.kind))
          .member("binding", slot_binding_name(slot.binding));
      w.member("rows", slot.rows).member("heads", slot.heads);
      w.member("bytes", slot_bytes(plan.shape, slot)).end_object();
    }
    w.end_array();
    w.key("steps").begin_array();
    for (int i = 0; i < int(rp.steps.size()); ++i) write_step(w, i, rp.steps[i]);
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.str();
}

}  // namespace tessera::sp
