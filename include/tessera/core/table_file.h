// The tuning tables' file format (decode/tune_table.h, tp/tune_table.h, sched/rule.h):
// tab-separated text, one row a line, '#' starting a comment line, a header comment on write.
// Each table names its fields and their ranges; this is what they share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct TableLine {
  int number = 0;                   // 1-based, for messages
  std::string text;                 // the whole line
  std::vector<std::string> fields;  // split at tabs
};

// The rows of the file at `path` (comment and empty lines skipped); a missing file has none.
std::vector<TableLine> read_table_lines(const std::string& path);

// Whether a parse of `text` (strtoll, strtod) that stopped at `end` read all of it: a field
// read from a file may hold a NUL byte, where the C parsers stop as at its end.
bool read_whole(const std::string& text, const char* end);

// A whole field holding an integer from `min` to `max` (range-checked before any narrowing).
bool parse_table_integer(const std::string& text, int64_t min, int64_t max, int64_t& value);
// A whole field holding an integer from 1 to `limit`.
bool parse_table_count(const std::string& text, int64_t limit, int64_t& value);
// A whole field holding a finite number > 0 (a time).
bool parse_table_time(const std::string& text, double& value);

// Throws kInvalidArgument naming `what` unless `name` reads back as written: not empty, no tab
// or line break, not starting with '#'.
void check_table_name(const std::string& name, const std::string& what);

// Replaces the file at `path` (creating its folder) with `text`. Throws kSystem naming `what`
// and the file when it cannot (the tables below; other text files, as the scheduler's
// timelines, too).
void write_text_file(const std::string& path, const std::string& text, const std::string& what);

// Replaces the file at `path` (creating its folder) with `header` as a comment line, then
// `rows`, each a line of tab-separated fields. Throws kSystem naming `what` when it cannot.
void write_table_lines(const std::string& path, const std::string& header,
                       const std::vector<std::string>& rows, const std::string& what);

}  // namespace tessera
