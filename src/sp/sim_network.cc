// FluidNetwork (see sim_network.h).
#include "sim_network.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::sp::detail {

namespace {
// Relative slack for "the same level" and "done by now" (rounding of sums of rates x times).
constexpr double kSlack = 1e-9;
}  // namespace

int FluidNetwork::add_port(double bytes_per_us) {
  TESSERA_CHECK_ARG(bytes_per_us > 0, "FluidNetwork::add_port(", bytes_per_us,
                    " bytes/us): expected > 0");
  capacity_.push_back(bytes_per_us);
  return int(capacity_.size()) - 1;
}

void FluidNetwork::start(double now, const std::vector<int>& ports, double cap_bytes_per_us,
                         double bytes, int64_t tag) {
  TESSERA_CHECK_ARG(bytes > 0 && cap_bytes_per_us > 0, "FluidNetwork::start(bytes = ", bytes,
                    ", cap = ", cap_bytes_per_us, "): expected both > 0");
  for (int p : ports) {
    TESSERA_CHECK_ARG(p >= 0 && p < int(capacity_.size()), "FluidNetwork::start: port ", p,
                      " outside 0..", int(capacity_.size()) - 1);
  }
  advance(now);
  flows_.push_back({ports, cap_bytes_per_us, bytes, 0.0, tag});
  share();
}

double FluidNetwork::next_finish() const {
  double t = std::numeric_limits<double>::infinity();
  for (const Flow& f : flows_) t = std::min(t, now_ + std::max(0.0, f.remaining) / f.rate);
  return t;
}

std::vector<int64_t> FluidNetwork::finish_until(double now) {
  advance(now);
  std::vector<std::pair<double, int64_t>> done;  // (time left, tag)
  std::vector<Flow> left;
  for (Flow& f : flows_) {
    const double time_left = std::max(0.0, f.remaining) / f.rate;
    if (time_left <= kSlack * std::max(1.0, now)) {
      done.emplace_back(time_left, f.tag);
    } else {
      left.push_back(std::move(f));
    }
  }
  flows_ = std::move(left);
  if (!done.empty()) share();
  std::stable_sort(done.begin(), done.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int64_t> tags;
  for (const auto& d : done) tags.push_back(d.second);
  return tags;
}

void FluidNetwork::advance(double now) {
  TESSERA_CHECK(now >= now_ - kSlack * std::max(1.0, now_), ErrorCode::kInternal,
                "FluidNetwork: time went back from ", now_, " to ", now, " us");
  const double dt = std::max(0.0, now - now_);
  for (Flow& f : flows_) f.remaining -= f.rate * dt;
  now_ = std::max(now_, now);
}

// Progressive filling: raise every unfrozen flow's rate together; a flow freezes when it
// reaches its own cap or one of its ports runs full. The result is the max-min fair share.
void FluidNetwork::share() {
  std::vector<double> residual = capacity_;
  std::vector<int> unfrozen_on(capacity_.size(), 0);
  std::vector<bool> frozen(flows_.size(), false);
  for (const Flow& f : flows_) {
    for (int p : f.ports) ++unfrozen_on[size_t(p)];
  }
  size_t unfrozen = flows_.size();
  while (unfrozen > 0) {
    double level = std::numeric_limits<double>::infinity();
    for (size_t p = 0; p < residual.size(); ++p) {
      if (unfrozen_on[p] > 0) level = std::min(level, residual[p] / unfrozen_on[p]);
    }
    for (size_t i = 0; i < flows_.size(); ++i) {
      if (!frozen[i]) level = std::min(level, flows_[i].cap);
    }
    const double at_level = level * (1.0 + kSlack);
    std::vector<bool> full(residual.size(), false);
    for (size_t p = 0; p < residual.size(); ++p) {
      full[p] = unfrozen_on[p] > 0 && residual[p] / unfrozen_on[p] <= at_level;
    }
    std::vector<size_t> freezing;
    for (size_t i = 0; i < flows_.size(); ++i) {
      if (frozen[i]) continue;
      bool stop = flows_[i].cap <= at_level;
      for (int p : flows_[i].ports) stop = stop || full[size_t(p)];
      if (stop) freezing.push_back(i);
    }
    for (size_t i : freezing) {
      frozen[i] = true;
      --unfrozen;
      flows_[i].rate = level;
      for (int p : flows_[i].ports) {
        residual[size_t(p)] = std::max(0.0, residual[size_t(p)] - level);
        --unfrozen_on[size_t(p)];
      }
    }
  }
}

}  // namespace tessera::sp::detail
