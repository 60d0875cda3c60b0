// What the benchmarks share besides their records (bench_record.h): the median of a run's
// timings (the upper middle one of an even count, as torch's anchors take it) and the name of
// the first GPU ("unknown" without one).
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

double median(std::vector<double> v);
std::string first_gpu_name();

}  // namespace tessera::cli
