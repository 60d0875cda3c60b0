// The tuning tables' shared file format (table_file.h).
#include "tessera/core/table_file.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera {

std::vector<TableLine> read_table_lines(const std::string& path) {
  std::vector<TableLine> out;
  std::ifstream in(path);
  if (!in) return out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    TableLine row{number, line, {}};
    std::istringstream fields(line);
    for (std::string field; std::getline(fields, field, '\t');) row.fields.push_back(field);
    out.push_back(std::move(row));
  }
  return out;
}

bool read_whole(const std::string& text, const char* end) {
  return !text.empty() && end == text.data() + text.size();
}

bool parse_table_integer(const std::string& text, int64_t min, int64_t max, int64_t& value) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (!read_whole(text, end) || v < min || v > max) return false;
  value = v;
  return true;
}

bool parse_table_count(const std::string& text, int64_t limit, int64_t& value) {
  return parse_table_integer(text, 1, limit, value);
}

bool parse_table_time(const std::string& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return read_whole(text, end) && std::isfinite(value) && value > 0;
}

void check_table_name(const std::string& name, const std::string& what) {
  TESSERA_CHECK_ARG(
      !name.empty() && name.find_first_of("\t\n\r") == std::string::npos && !name.starts_with('#'),
      what, " = '", name, "': expected a name without tabs or line breaks, not starting with '#'");
}

void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  const std::filesystem::path file(path);
  std::error_code error;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), error);
  TESSERA_CHECK(!error, ErrorCode::kSystem, what, " ", path, ": cannot make its directory (",
                error.message(), ")");
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();  // a full disk may show only when the buffer is flushed
  TESSERA_CHECK(bool(out), ErrorCode::kSystem, what, " ", path, ": cannot write");
}

void write_table_lines(const std::string& path, const std::string& header,
                       const std::vector<std::string>& rows, const std::string& what) {
  std::string text = "# " + header + "\n";
  for (const std::string& row : rows) text += row + "\n";
  write_text_file(path, text, what);
}

}  // namespace tessera
