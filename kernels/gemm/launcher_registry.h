// A registry of kernel launchers keyed by what they were instantiated for; explicit
// instantiations add theirs at load time (a static initializer), hosts look them up.
// One instance per (Key, Launcher) pair in the library.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

namespace tessera::gemm::kernels {

template <class Key, class Launcher>
class LauncherRegistry {
 public:
  static bool add(const Key& key, const Launcher& launcher) {
    std::lock_guard<std::mutex> lock(mutex());
    entries().emplace_back(key, launcher);
    return true;
  }
  // An empty (value-initialized) launcher when none was registered for the key.
  static Launcher find(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex());
    for (const auto& [k, launcher] : entries()) {
      if (k == key) return launcher;
    }
    return {};
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::pair<Key, Launcher>>& entries() {
    static std::vector<std::pair<Key, Launcher>> e;
    return e;
  }
};

}  // namespace tessera::gemm::kernels
