// The `tessera` command line: info, demo, bench. Subcommands live in their own files.
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::puts("tessera: under construction");
  return 0;
}
