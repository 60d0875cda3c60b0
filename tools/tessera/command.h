// Subcommands of the `tessera` CLI register themselves here, one file each:
//   static const CommandRegistration kInfo{"info", "GPUs, links, versions, parameters", run_info};
// main() dispatches on the longest registered prefix of argv ("bench comm" before "bench").
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tessera::cli {

// argv after the command words; returns the process exit code.
using CommandFn = std::function<int(const std::vector<std::string>& args, int argc, char** argv)>;

struct Command {
  std::string name;  // "info", "bench comm", ...
  std::string help;
  CommandFn run;
};

struct CommandRegistration {
  CommandRegistration(std::string name, std::string help, CommandFn run);
};

const std::vector<Command>& commands();

}  // namespace tessera::cli
