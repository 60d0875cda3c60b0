// The `tessera` command line. Subcommands live in their own files and register in command.h.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "command.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"

namespace tessera::cli {

namespace {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

void print_usage() {
  std::fprintf(stderr, "usage: tessera <command> [options]\n\ncommands:\n");
  for (const auto& c : registry()) std::fprintf(stderr, "  %-14s %s\n", c.name.c_str(), c.help.c_str());
  std::fprintf(stderr, "\n`tessera <command> --help` describes a command's options.\n");
}
}  // namespace

CommandRegistration::CommandRegistration(std::string name, std::string help, CommandFn run) {
  registry().push_back({std::move(name), std::move(help), std::move(run)});
}

const std::vector<Command>& commands() { return registry(); }

}  // namespace tessera::cli

int main(int argc, char** argv) {
  using namespace tessera::cli;
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty() || words[0] == "--help" || words[0] == "-h" || words[0] == "help") {
    print_usage();
    return words.empty() ? 2 : 0;
  }
  const Command* best = nullptr;
  size_t best_words = 0;
  for (const auto& c : commands()) {
    // Split the command name into words and match them against argv's first words.
    std::vector<std::string> parts;
    size_t start = 0;
    while (start <= c.name.size()) {
      size_t sp = c.name.find(' ', start);
      parts.push_back(c.name.substr(start, sp == std::string::npos ? std::string::npos : sp - start));
      if (sp == std::string::npos) break;
      start = sp + 1;
    }
    if (parts.size() > words.size() || parts.size() <= best_words) continue;
    bool match = true;
    for (size_t i = 0; i < parts.size(); ++i) match &= parts[i] == words[i];
    if (match) {
      best = &c;
      best_words = parts.size();
    }
  }
  if (best == nullptr) {
    std::fprintf(stderr, "tessera: unknown command '%s'\n\n", words[0].c_str());
    print_usage();
    return 2;
  }
  try {
    // A bad TESSERA_* value fails here, once, naming it; `info` shows every value instead.
    if (best->name != "info") tessera::check_params();
    std::vector<std::string> rest(words.begin() + long(best_words), words.end());
    return best->run(rest, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
